"""The HTTP fronts on the one HTTP server (http_server.py): `serve`'s Streamable HTTP endpoint, its sessions, the
HTTP host side, bearer tokens and OAuth; and the web console's page (web_console/)."""
