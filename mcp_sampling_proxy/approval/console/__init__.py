"""The companion console: the socket the proxy serves, the client a person runs, their messages."""
