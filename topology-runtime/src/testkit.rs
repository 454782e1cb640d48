//! Real nats-server processes for tests.
