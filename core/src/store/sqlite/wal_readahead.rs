//! Keeps the part of the WAL file the writer is about to overwrite in the page cache.
//!
//! Once the checkpointer has restarted the WAL, the writer overwrites the file from its
//! start, frame after frame. A frame (24-byte header and one page) does not fill whole 4 KiB
//! file pages, so when the file page a frame goes into is no longer cached, the kernel
//! reads it from disk before the write can go on, and the whole batch of turns waits for
//! that read. Cached pages of a file nobody has touched for seconds are what a machine
//! short of memory (a container's memory limit) or one that hands idle memory back to its
//! host (proactive reclaim) drops first; the reads come mostly in the seconds after a WAL
//! restart, when the writer comes back to the file's oldest pages. Measurements:
//! `docs/performance.md`, "WAL read-ahead".
//!
//! So after each checkpoint pass the checkpointer asks the kernel to read ahead the next
//! [`WINDOW`] bytes past the last frame (`posix_fadvise(WILLNEED)`: pages still cached cost
//! a lookup, missing ones are read in the background, off the writer's path).

use std::path::{Path, PathBuf};

/// How far past the WAL's last frame the checkpointer keeps the file cached: several
/// checkpoint passes' worth of frames at the highest load the writer sustains.
const WINDOW: u64 = 8 << 20;

/// The bytes asked for in one `posix_fadvise` call: Linux reads ahead at most the larger of
/// the device's largest request and its readahead setting per call (128 KiB and more on
/// common devices), and quietly drops the rest.
const CHUNK: u64 = 256 << 10;

/// The WAL file's header, before its first frame.
const WAL_HEADER: u64 = 32;

/// A WAL frame's header, before its page.
const FRAME_HEADER: u64 = 24;

/// Where in the WAL file the frame after `frames` frames begins, for pages of `page_size`
/// bytes (none before the first: a negative count is no frame).
pub(crate) fn next_frame_offset(frames: i64, page_size: u64) -> u64 {
    let frames = u64::try_from(frames).unwrap_or(0);
    WAL_HEADER + frames * (FRAME_HEADER + page_size)
}

/// The ranges, `(offset, length)`, that one read-ahead past `frames` frames asks for.
pub(crate) fn window(frames: i64, page_size: u64) -> impl Iterator<Item = (u64, u64)> {
    // from the start of the file page the next frame begins in
    let start = next_frame_offset(frames, page_size) / 4096 * 4096;
    (0..WINDOW / CHUNK).map(move |i| (start + i * CHUNK, CHUNK))
}

/// The WAL file of one database and the page size of its frames.
pub(crate) struct WalReadahead {
    path: PathBuf,
    page_size: u64,
    /// opened at the first read-ahead that finds the file (it appears with the first write)
    file: Option<std::sync::Arc<std::fs::File>>,
    /// the frame count last read ahead of: while the writer adds none, nothing to do
    last: Option<i64>,
}

impl WalReadahead {
    /// For the database file at `database`, whose pages are `page_size` bytes.
    pub(crate) fn new(database: &Path, page_size: u64) -> Self {
        let mut name = database.as_os_str().to_owned();
        name.push("-wal");
        WalReadahead {
            path: PathBuf::from(name),
            page_size,
            file: None,
            last: None,
        }
    }

    /// Asks the kernel to cache the [`WINDOW`] past the WAL's `frames` frames (0: a WAL
    /// that starts over), off the calling thread, unless it was asked for that count last
    /// time (an idle bot asks nothing). Failures are logged and change nothing: the writer
    /// then reads what it needs itself.
    pub(crate) async fn ahead_of(&mut self, frames: i64) {
        if self.file.is_none() {
            match std::fs::File::open(&self.path) {
                Ok(file) => self.file = Some(std::sync::Arc::new(file)),
                // no WAL yet: nothing written since the database was opened
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot open the WAL to read it ahead");
                    return;
                }
            }
        }
        let Some(file) = self.file.clone() else {
            return;
        };
        if self.last.replace(frames) == Some(frames) {
            return;
        }
        let page_size = self.page_size;
        let advised = tokio::task::spawn_blocking(move || advise(&file, frames, page_size));
        match advised.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "reading the WAL ahead failed"),
            Err(e) => tracing::debug!(error = %e, "reading the WAL ahead stopped"),
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn advise(file: &std::fs::File, frames: i64, page_size: u64) -> std::io::Result<()> {
    use rustix::fs::{Advice, fadvise};
    for (offset, len) in window(frames, page_size) {
        fadvise(
            file,
            offset,
            std::num::NonZeroU64::new(len),
            Advice::WillNeed,
        )?;
    }
    Ok(())
}

/// Elsewhere the kernel's own read-ahead is all there is.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn advise(_file: &std::fs::File, _frames: i64, _page_size: u64) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_frame_follows_the_header_and_the_frames_before_it() {
        assert_eq!(next_frame_offset(0, 2048), 32);
        assert_eq!(next_frame_offset(1, 2048), 32 + 2072);
        assert_eq!(next_frame_offset(1000, 4096), 32 + 1000 * 4120);
        // PRAGMA wal_checkpoint says -1 outside WAL mode
        assert_eq!(next_frame_offset(-1, 2048), 32);
    }

    #[test]
    fn the_window_starts_at_the_file_page_of_the_next_frame_and_covers_it_in_chunks() {
        let ranges: Vec<_> = window(3, 2048).collect();
        // frame 4 begins at 32 + 3 * 2072 = 6248, in the file page at 4096
        assert_eq!(ranges.first(), Some(&(4096, CHUNK)));
        assert_eq!(ranges.len() as u64 * CHUNK, WINDOW);
        assert!(ranges.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0));
        // a WAL that starts over is read ahead from its beginning
        assert_eq!(window(0, 2048).next(), Some((0, CHUNK)));
    }

    #[tokio::test]
    async fn reading_ahead_a_missing_or_short_wal_changes_nothing() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let database = dir.path().join("kaiwa.db");
        let mut readahead = WalReadahead::new(&database, 2048);
        // no WAL yet
        readahead.ahead_of(10).await;
        assert!(readahead.file.is_none());
        assert_eq!(readahead.last, None);
        let wal = dir.path().join("kaiwa.db-wal");
        std::fs::write(&wal, vec![7u8; 10_000]).expect("a WAL file");
        // a window past the end of the file, and one over it
        readahead.ahead_of(1_000).await;
        readahead.ahead_of(0).await;
        assert!(readahead.file.is_some());
        assert_eq!(readahead.last, Some(0));
        assert_eq!(std::fs::read(&wal).expect("the WAL"), vec![7u8; 10_000]);
    }
}
