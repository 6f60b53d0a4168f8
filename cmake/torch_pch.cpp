// Owner of the shared LibTorch precompiled header; holds no code.
