"""The conversation data FastChat trains on: structural checks and token-length statistics."""
