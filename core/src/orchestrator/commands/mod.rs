//! Commands the orchestrator answers itself, before any flow: the admins' ([`admin`]), the
//! privacy commands ([`privacy`]) and `/help` ([`help`]).

pub mod admin;
mod help;
mod lang;
mod privacy;
