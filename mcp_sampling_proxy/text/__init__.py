"""Text the proxy shows or writes: made safe for a screen, secrets masked, servers named."""
