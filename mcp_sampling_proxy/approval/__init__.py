"""Asking humans: terminal, companion console, host forms, URL safety."""
