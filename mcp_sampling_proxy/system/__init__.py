"""This machine: process hardening, the controlling terminal, files shared with the user's other
processes, whether an address is loopback."""
