"""Helper scripts copied into every environment-image build context (run by python3 there)."""
