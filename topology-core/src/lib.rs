//! Pure declarations and rules.
