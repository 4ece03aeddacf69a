"""The Streamable HTTP front (`serve`): the endpoint, its sessions, the HTTP host side, bearer tokens and OAuth."""
