"""The GGUF container, below the model readers and writers: gguf/container.py (GgufFile, the header
check and its limits, metadata access, block dequantization). gpt/gguf_file.py (GPT-2) and
gpt/gguf_llama.py (the Llama family) build on it; nothing here imports the model."""
