"""The model: building or loading it and its tokenizer (models), mixed precision (precision), LoRA adapters
(lora), and the chunked per-token log-prob forward every scorer uses (logprobs).

May import: algos, conf, evals; trainer.run."""
