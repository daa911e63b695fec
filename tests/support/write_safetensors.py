"""write_safetensors(path, [(name, tensor), ...], metadata): a safetensors file written by hand (an 8-byte
little-endian header length, the JSON header padded to 8 bytes, the tensors' bytes in order), so that the replay
scripts of tests/ need nothing but torch. float32 and int64 tensors."""
import json
import struct
from pathlib import Path

import torch


def write_safetensors(path, tensors, metadata):
    formats = {torch.float32: ("F32", "f"), torch.int64: ("I64", "q")}
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for name, tensor in tensors:
        dtype, code = formats[tensor.dtype]
        values = tensor.detach().contiguous().flatten().tolist()
        data = struct.pack(f"<{len(values)}{code}", *values)
        header[name] = {"dtype": dtype, "shape": list(tensor.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks))
