"""The data contract both sides share: metric catalog, record model, frame codec."""
