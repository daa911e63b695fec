#pragma once
// trainers: aggregate header (filled in as the layer grows).
