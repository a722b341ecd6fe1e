"""Readers of the raw dataset formats."""
