// Translation unit that owns the shared LibTorch precompiled header.
