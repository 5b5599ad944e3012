//! Interview flow tests.
