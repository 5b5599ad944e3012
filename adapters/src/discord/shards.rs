//! Which gateway shards an instance runs (`[discord] shards = "0-1/4"`; by default all of
//! the count Discord recommends), and the leases that keep two instances on one database
//! from running the same shard: an instance whose shards another runs stands by and takes
//! them over once that one's leases expire.

use kaiwa_core::orchestrator::{ForAdapters, RENEW_EVERY};
use std::fmt;

/// Shards `first..=last` of `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardRange {
    pub first: u32,
    pub last: u32,
    pub total: u32,
}

impl ShardRange {
    /// Every shard of `total`.
    pub fn all(total: u32) -> ShardRange {
        let total = total.max(1);
        ShardRange {
            first: 0,
            last: total - 1,
            total,
        }
    }

    /// `"FIRST-LAST/TOTAL"` or `"SHARD/TOTAL"`, e.g. `"0-1/4"`, `"3/4"`.
    pub fn parse(text: &str) -> Result<ShardRange, String> {
        let bad = || format!("{text:?} is not a shard range like \"0-1/4\" or \"2/4\"");
        let (range, total) = text.trim().split_once('/').ok_or_else(bad)?;
        let number = |s: &str| s.trim().parse::<u32>().map_err(|_| bad());
        let total = number(total)?;
        let (first, last) = match range.split_once('-') {
            Some((first, last)) => (number(first)?, number(last)?),
            None => {
                let shard = number(range)?;
                (shard, shard)
            }
        };
        if total == 0 || first > last || last >= total {
            return Err(format!(
                "shards {text:?}: want FIRST <= LAST < TOTAL (shards are numbered from 0)"
            ));
        }
        Ok(ShardRange { first, last, total })
    }

    pub fn contains(&self, shard: u32) -> bool {
        (self.first..=self.last).contains(&shard)
    }

    pub fn shards(&self) -> impl Iterator<Item = u32> + use<> {
        self.first..=self.last
    }

    fn lease(&self, shard: u32) -> String {
        format!("discord:shard:{shard}/{}", self.total)
    }
}

impl fmt::Display for ShardRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}/{}", self.first, self.total)
        } else {
            write!(f, "{}-{}/{}", self.first, self.last, self.total)
        }
    }
}

/// The shard Discord delivers a guild's events on; direct messages come on shard 0.
pub fn shard_of(guild: Option<u64>, total: u32) -> u32 {
    guild.map_or(0, |g| ((g >> 22) % u64::from(total.max(1))) as u32)
}

/// Takes the leases of every shard in `range` (several instances on one database), or
/// none: `false` when another instance runs one of them.
pub(super) async fn take(orchestrator: &ForAdapters, range: ShardRange) -> bool {
    let mut taken: Vec<String> = Vec::new();
    for shard in range.shards() {
        let lease = range.lease(shard);
        if !orchestrator.hold(&lease).await {
            for lease in taken {
                orchestrator.let_go(&lease).await;
            }
            return false;
        }
        taken.push(lease);
    }
    true
}

/// Renews the leases of `range` every [`RENEW_EVERY`]; returns when one is lost (this
/// instance could not renew in time and another took the shard over).
pub(super) async fn keep(orchestrator: &ForAdapters, range: ShardRange) {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        for shard in range.shards() {
            if !orchestrator.hold(&range.lease(shard)).await {
                tracing::error!(
                    shard,
                    total = range.total,
                    "lost the lease of a Discord shard"
                );
                return;
            }
        }
    }
}

/// Lets go of the leases of `range`: another instance may run the shards at once.
pub(super) async fn let_go(orchestrator: &ForAdapters, range: ShardRange) {
    for shard in range.shards() {
        orchestrator.let_go(&range.lease(shard)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_print() {
        let r = ShardRange::parse("0-1/4").expect("a range");
        assert_eq!(
            r,
            ShardRange {
                first: 0,
                last: 1,
                total: 4
            }
        );
        assert_eq!(r.to_string(), "0-1/4");
        assert_eq!(
            ShardRange::parse(" 3/4 ").map(|r| r.to_string()),
            Ok("3/4".into())
        );
        for bad in ["", "4", "1-0/4", "0-4/4", "4/4", "0/0", "a-b/c", "0-1/"] {
            assert!(ShardRange::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(ShardRange::all(1).to_string(), "0/1");
    }

    #[test]
    fn guilds_map_to_shards_as_discord_does() {
        assert_eq!(shard_of(None, 4), 0);
        assert_eq!(shard_of(Some(7_000), 2), 0);
        assert_eq!(shard_of(Some(1 << 22), 2), 1);
        assert_eq!(shard_of(Some(81_384_788_765_712_384), 1), 0);
        // (guild_id >> 22) % num_shards: the creation time's bits pick the shard
        assert_eq!(shard_of(Some((7 << 22) | 12_345), 4), 3);
    }
}
