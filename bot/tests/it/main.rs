//! The `kaiwa` binary's tests, one test program (one link, one binary on disk instead of
//! one per file): each module drives the real binary or its library from the outside.

mod chat_pipe;
mod common;
mod console;
mod container;
mod crash;
mod db_copy;
mod instances;
mod kb_index;
mod plugin;
mod run_service;
mod slack_run;
mod trace_interview;
mod upgrade;
