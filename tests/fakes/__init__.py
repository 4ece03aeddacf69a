"""In-process fakes (real sockets, no mocks) for the test suite and benchmarks."""
