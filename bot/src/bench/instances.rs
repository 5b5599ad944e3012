//! `kaiwa bench --instances N`: N instances against one, in the same run ([`instances_and_one`]).

use super::{BenchOptions, Step, round3, run_on, throughput_ratio};
use anyhow::{Context, bail};
use kaiwa::config::Settings;

/// The server `--database` is on, where `--instances N` creates a database for each of its
/// runs but the first (the one-instance runs it is measured against too) and drops it
/// afterwards.
struct Server {
    connection: sqlx::PgConnection,
    url: reqwest::Url,
    /// The database `--database` names: the others are named after it.
    name: String,
}

impl Server {
    async fn connect(url: &str) -> anyhow::Result<Server> {
        use sqlx::Connection;
        let redacted = kaiwa::app::redact_url(url);
        let parsed = reqwest::Url::parse(url).with_context(|| format!("reading {redacted}"))?;
        let mut connection = sqlx::PgConnection::connect(url)
            .await
            .with_context(|| format!("connecting to {redacted}"))?;
        // as the server spells it (the URL's path may be percent-encoded, or empty)
        let name: String = sqlx::query_scalar("SELECT current_database()::text")
            .fetch_one(&mut connection)
            .await
            .with_context(|| format!("reading the database's name on {redacted}"))?;
        Ok(Server {
            connection,
            url: parsed,
            name,
        })
    }

    /// The name of the run database `suffix` stands for.
    fn database(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.name)
    }

    /// A new database named `{name}_{suffix}`; its URL.
    async fn create(&mut self, suffix: &str) -> anyhow::Result<String> {
        let name = self.database(suffix);
        // PostgreSQL would cut a longer name, and the URL would name another database
        if name.len() > MAX_IDENTIFIER {
            bail!(
                "--instances names its runs' databases after --database's ({name}): \
                 give --database a name of at most {} bytes",
                MAX_IDENTIFIER - suffix.len() - 1
            );
        }
        let sql = format!("CREATE DATABASE {}", quoted(&name));
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut self.connection)
            .await
            .with_context(|| {
                format!("creating the database {name} for a run (the user needs CREATEDB)")
            })?;
        let mut url = self.url.clone();
        url.set_path(&format!("/{name}"));
        Ok(url.to_string())
    }

    async fn drop_database(&mut self, suffix: &str) -> anyhow::Result<()> {
        let name = self.database(suffix);
        let sql = format!("DROP DATABASE IF EXISTS {}", quoted(&name));
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut self.connection)
            .await
            .with_context(|| format!("dropping the database {name}"))?;
        Ok(())
    }

    /// Asks the server for a checkpoint, where this user may (a superuser or
    /// `pg_checkpoint`), so that the dirty pages of one run are not written during the next.
    async fn checkpoint(&mut self) {
        if let Err(e) = sqlx::query("CHECKPOINT")
            .execute(&mut self.connection)
            .await
        {
            tracing::debug!(error = %e, "no checkpoint between the bench's runs");
        }
    }
}

/// The longest identifier PostgreSQL keeps whole (`NAMEDATALEN` - 1).
const MAX_IDENTIFIER: usize = 63;

/// `name` as a PostgreSQL identifier: in double quotes, its own quotes doubled.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `--instances N`: [`BenchOptions::rounds`] rounds of one instance and N, each run on a
/// fresh database (the first N instances' on the one `url` names), the order alternating
/// round by round. The report is the N instances' (turns/s over all their rounds, the
/// median round's latencies) with the one instance's beside it and each round's ratio.
pub(super) async fn instances_and_one(
    options: &BenchOptions,
    settings: &Settings,
    url: &str,
    script: &'static [Step],
) -> anyhow::Result<serde_json::Value> {
    let mut server = Server::connect(url).await?;
    let (mut ones, mut several) = (Vec::new(), Vec::new());
    for round in 0..options.rounds.max(1) {
        let order = if round % 2 == 0 {
            [1, options.instances]
        } else {
            [options.instances, 1]
        };
        for instances in order {
            // the first run of N instances is on the database named (it is kept, as a
            // single run's is), the others on databases of their own
            let kept = round == 0 && instances > 1;
            let suffix = format!("r{round}_i{instances}");
            let url = if kept {
                url.to_string()
            } else {
                server.create(&suffix).await?
            };
            let run = BenchOptions {
                instances,
                database: Some(url.clone()),
                flow: options.flow.clone(),
                form: options.form.clone(),
                ..*options
            };
            server.checkpoint().await;
            let report = run_on(&run, settings, &url, None, script).await;
            let dropped = if kept {
                Ok(())
            } else {
                server.drop_database(&suffix).await
            };
            let report = report?;
            dropped?;
            if instances == 1 {
                ones.push(report);
            } else {
                several.push(report);
            }
        }
    }
    let mut report = combined(&several);
    let one = combined(&ones);
    report["vs_one_instance"] = serde_json::json!(throughput_ratio(&report, &one));
    let rounds: Vec<f64> = ones
        .iter()
        .zip(&several)
        .map(|(one, several)| throughput_ratio(several, one))
        .collect();
    // a shared machine's rounds scatter (docs/performance.md): the mean round and the
    // interval that holds the true one, 19 times in 20
    if let Some((mean, low, high)) = mean_and_interval(&rounds) {
        report["rounds_vs_one_instance_mean"] = serde_json::json!(round3(mean));
        report["rounds_vs_one_instance_ci95"] = serde_json::json!([round3(low), round3(high)]);
    }
    report["rounds_vs_one_instance"] = serde_json::json!(rounds);
    report["one_instance"] = serde_json::json!({
        "turns_per_sec": one["turns_per_sec"],
        "p50_ms": one["p50_ms"],
        "p99_ms": one["p99_ms"],
        "cpu_ms_per_turn": one["cpu_ms_per_turn"],
    });
    Ok(report)
}

/// Runs of the same load as one: turns/s over all of them (turns over wall time), the
/// rest the median run's (by p99).
fn combined(runs: &[serde_json::Value]) -> serde_json::Value {
    let sum = |key: &str| runs.iter().filter_map(|r| r[key].as_f64()).sum::<f64>();
    let mut by_p99: Vec<&serde_json::Value> = runs.iter().collect();
    by_p99.sort_by(|a, b| {
        let p99 = |r: &serde_json::Value| r["p99_ms"].as_f64().unwrap_or(0.0);
        p99(a).total_cmp(&p99(b))
    });
    let Some(median) = by_p99.get(by_p99.len() / 2) else {
        return serde_json::Value::Null;
    };
    let mut report = (*median).clone();
    let turns = runs.iter().filter_map(|r| r["turns"].as_u64()).sum::<u64>();
    let wall = sum("wall_secs");
    if wall > 0.0 {
        report["turns_per_sec"] = serde_json::json!(round3(turns as f64 / wall));
    }
    let cpu = runs
        .iter()
        .filter_map(|r| Some(r["cpu_ms_per_turn"].as_f64()? * r["turns"].as_f64()?))
        .sum::<f64>();
    if turns > 0 {
        report["cpu_ms_per_turn"] = serde_json::json!(round3(cpu / turns as f64));
    }
    report["turns"] = serde_json::json!(turns);
    report["wall_secs"] = serde_json::json!(round3(wall));
    report["runs"] = serde_json::json!(runs.len());
    report
}

/// Student's t at 97.5 % for 1 – 30 degrees of freedom (beyond: the normal's 1.96).
const T_975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// The mean of `samples` and its 95 % confidence interval (Student's t); none for fewer
/// than two.
fn mean_and_interval(samples: &[f64]) -> Option<(f64, f64, f64)> {
    let n = samples.len();
    if n < 2 {
        return None;
    }
    let mean = samples.iter().sum::<f64>() / n as f64;
    let variance = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let t = T_975.get(n - 2).copied().unwrap_or(1.96);
    let half = t * (variance / n as f64).sqrt();
    Some((mean, mean - half, mean + half))
}

#[cfg(test)]
mod tests {
    use super::mean_and_interval;

    #[test]
    fn the_interval_widens_with_scatter_and_narrows_with_rounds() {
        assert_eq!(mean_and_interval(&[]), None);
        assert_eq!(mean_and_interval(&[0.9]), None);
        let (mean, low, high) = mean_and_interval(&[1.0, 1.0, 1.0, 1.0]).expect("four");
        assert_eq!((mean, low, high), (1.0, 1.0, 1.0));
        // 0.9 and 1.1: sd 0.141, t(1) = 12.706 → ± 1.27
        let (mean, low, high) = mean_and_interval(&[0.9, 1.1]).expect("two");
        assert!((mean - 1.0).abs() < 1e-9);
        assert!(
            (high - 2.2706).abs() < 1e-3 && (low + 0.2706).abs() < 1e-3,
            "{low} {high}"
        );
        // the same scatter over 40 rounds: ± 1.96 × 0.1 / √40
        let many: Vec<f64> = (0..40)
            .map(|i| if i % 2 == 0 { 0.9 } else { 1.1 })
            .collect();
        let (_, low, high) = mean_and_interval(&many).expect("forty");
        let half = 1.96 * (0.4 / 39.0_f64).sqrt() / 40.0_f64.sqrt();
        assert!((high - 1.0 - half).abs() < 1e-9 && (1.0 - low - half).abs() < 1e-9);
    }
}
