#pragma once
// parallel: aggregate header (filled in as the layer grows).
