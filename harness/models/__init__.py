"""Transformers models: any variant swapped into a model's attention (hf_adapter), a model loaded from a folder with its
tokenizer (hf_model), and the offline all-MiniLM-L6-v2 (minilm); the `model` and `real` inputs and the studies use them."""
