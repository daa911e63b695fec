#pragma once
// comm: aggregate header (filled in as the layer grows).
