"""The loader's saved state (loaders/state.py): state_dict by value, resume, resume after an append."""
