//! Help-desk tests.
