"""The companion console as a page on 127.0.0.1 (`console --web`): its state, its views, its ASGI app, its run."""
