#pragma once
// copy_on_source_stream: a copy from one GPU to another that orders only the destination after the source, for a
// destination that nobody else touches (a captured step's gathered losses).

#include "tandem/core/tensor.h"

namespace tandem {

// Note [Copies on the source stream]: Tensor::copy_ between GPUs orders both ways (Note [Cross-device copy
// ordering]): the destination's compute stream waits for the source's, and then the source's waits for the copy.
// Inside a captured graph the second wait is an edge from the destination device's work back into the source
// device's: work issued on the source's GPU after the copy (a replica's backward) would wait for everything the
// destination's GPU had been given before (another replica's backward). copy_on_source_stream orders one way
// only: the copy runs on the source's compute stream (after its producers; the source's block is reused only after
// it, since it runs on the stream that block belongs to), and the destination's compute stream waits for it.
// Nothing orders the copy after earlier users of the destination, so the destination must be private: allocated
// before, and read or written only by work ordered after the copies that write it.
//
// Copies src into dst (contiguous, of one dtype and number of elements) as Note [Copies on the source stream] says
// when both are on different GPUs, and as dst.copy_(src) otherwise. Requires: dst is read or written by nothing
// that is still running or that is not ordered after this copy. Errors: undefined or non-contiguous tensors; another
// dtype or number of elements.
void copy_on_source_stream(const Tensor& src, const Tensor& dst);

}  // namespace tandem
