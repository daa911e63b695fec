#pragma once
// nn: aggregate header (filled in as the layer grows).
