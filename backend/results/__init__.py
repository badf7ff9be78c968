"""From a run to a model: its summary, a chat with it, and an export with a model card.

The model is only ever loaded by ``worker.py``, a self-contained script run with the training
side's python (like the training entry), so the wizard process never imports torch.
"""
