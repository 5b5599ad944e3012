//! The session as a turn leaves it: [`Prepared`], worked out on the turn's own task before
//! it reaches the writer. (The decoders both backends share are in [`crate::store::rows`].)

use crate::store::rows::{applied, pending_json};
use crate::store::{SessionRecord, StoreError, TurnCommit};

/// What a turn's rows need of its session, worked out by the turn's own task
/// ([`Store::commit_turn`], in parallel with the other turns) rather than on the writer's
/// thread, which every turn waits for: the session as the turn leaves it and its pending
/// options as JSON.
pub(super) struct Prepared {
    pub(super) session: SessionRecord,
    pub(super) pending: Option<String>,
}

impl Prepared {
    pub(super) fn of(commit: &TurnCommit) -> Result<Self, StoreError> {
        let session = applied(commit);
        let pending = pending_json(&session)?;
        Ok(Prepared { session, pending })
    }
}
