"""The GGUF container, below the model readers and writers: gguf/container.py (GgufFile, metadata
access, block dequantization) and gguf/layout.py (the header check and its limits). gpt/gguf_file.py
(GPT-2) and gpt/gguf_llama.py (the Llama family) build on it; nothing here imports the model."""
