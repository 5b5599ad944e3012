//! Reading flow tests.
