"""`doctor`: checks of the setup the proxy depends on, each section a list of checks with its fix;
`commands/doctor.py` prints them."""
