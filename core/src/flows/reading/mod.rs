//! The reading companion (seed 004, Knowva). So far: the local [`catalogue::Catalogue`]
//! (`config/books.toml`) and the [`book_guide::BookGuide`] sub-agent for expert questions,
//! built on the shared research workflow. The Reading, Onboarding, Mentor and Recommendation
//! agents and the reading flow itself are not built yet.

pub mod book_guide;
pub mod catalogue;
