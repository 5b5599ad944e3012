//! `kaiwa db copy`: everything Kaiwa stores, from one database to another, either way
//! between SQLite and PostgreSQL ([`copy`]).
//!
//! - The target is migrated first and must hold no data; nothing is written into one that
//!   does. While the copy runs the target carries a marker (a lease named [`COPY_MARKER`]):
//!   `kaiwa run` refuses a database with it, and a copy run again into a target a killed copy
//!   left finds it, empties what that copy wrote and starts again.
//! - The source is read in one snapshot (SQLite: one read transaction in WAL mode;
//!   PostgreSQL: `REPEATABLE READ`), so a running bot may go on writing: what it commits
//!   after the snapshot is not copied.
//! - Tables go parents first, each in transactions of [`BATCH`] rows with their ids as they
//!   were (PostgreSQL's identity sequences are moved past them); the inbox keeps its order.
//! - At the end the rows of every table are counted on both sides.

use super::db::{Db, OnDb};
use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use super::{Backend, StoreError};
use futures::TryStreamExt;
use sqlx::{Postgres, QueryBuilder, Row, Sqlite, TypeInfo, ValueRef};
use std::collections::HashMap;

/// Every table Kaiwa keeps, parents before children (foreign keys). A migration that adds a
/// table adds it here (a test checks the list against both schemas).
pub const TABLES: &[&str] = &[
    "users",
    "sessions",
    "messages",
    "processed_updates",
    "llm_calls",
    "submissions",
    "helpdesk_tickets",
    "reading_records",
    "insights",
    "moods",
    "profile_entries",
    "mentor_feedback",
    "recommendations",
    "weekly_reviews",
    "inbox",
    "leases",
    "holds",
    "relays",
    "search_cache",
    "console_links",
    "console_sessions",
    "passage_vectors",
];

/// Columns that point at a session without a foreign key on PostgreSQL (table, column):
/// see `migrations/postgres/20261129000012_ledger_rows_unchecked.sql`.
const POINTERS: &[(&str, &str)] = &[
    ("llm_calls", "session_id"),
    ("processed_updates", "session_id"),
];

/// The lease that marks a database as the target of a copy not finished.
pub const COPY_MARKER: &str = "kaiwa-db-copy";

/// Rows per transaction on the target.
pub const BATCH: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("database error while {context}: {source}")]
    Database {
        context: String,
        #[source]
        source: sqlx::Error,
    },
    #[error(
        "the target already holds data ({rows} rows in {table}): kaiwa db copy writes only into an empty database; nothing was written"
    )]
    TargetNotEmpty { table: String, rows: i64 },
    #[error("no SQLite database at {0}")]
    NoSource(String),
    #[error(
        "the source is the target of a kaiwa db copy that did not finish: run that copy again first"
    )]
    SourceUnfinished,
    #[error("the source and the target are the same database")]
    SameDatabase,
    #[error("the copy differs from the source: {0}")]
    Counts(String),
}

fn failed(context: impl Into<String>) -> impl FnOnce(sqlx::Error) -> CopyError {
    let context = context.into();
    move |source| CopyError::Database { context, source }
}

/// A table's rows on both sides once copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableCopied {
    pub table: String,
    pub source_rows: i64,
    pub target_rows: i64,
}

/// A value of any column Kaiwa stores.
#[derive(Debug, Clone)]
enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Bytes(Vec<u8>),
    Bool(bool),
}

/// What a target column takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Real,
    Text,
    Bytes,
    Bool,
}

impl Kind {
    fn of(declared: &str) -> Kind {
        let t = declared.to_ascii_lowercase();
        if t.contains("bool") {
            Kind::Bool
        } else if t.contains("int") {
            Kind::Int
        } else if t.contains("blob") || t.contains("bytea") {
            Kind::Bytes
        } else if t.contains("real") || t.contains("double") || t.contains("float") {
            Kind::Real
        } else {
            Kind::Text
        }
    }
}

/// `value` as a column of `kind` takes it (SQLite keeps booleans as 0 / 1).
fn coerce(value: Value, kind: Kind) -> Value {
    match (value, kind) {
        (Value::Int(v), Kind::Bool) => Value::Bool(v != 0),
        (Value::Bool(v), Kind::Int) => Value::Int(i64::from(v)),
        (value, _) => value,
    }
}

/// An open database, by backend.
enum Opened {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl Opened {
    async fn open(url: &str) -> Result<Opened, CopyError> {
        Ok(match Backend::of(url)? {
            Backend::Sqlite => Opened::Sqlite(SqliteStore::connect(url).await?),
            Backend::Postgres => Opened::Postgres(PgStore::connect(url).await?),
        })
    }

    fn db(&self) -> &Db {
        match self {
            Opened::Sqlite(s) => s.db(),
            Opened::Postgres(s) => s.db(),
        }
    }

    async fn close(&self) {
        use super::Store;
        match self {
            Opened::Sqlite(s) => s.close().await,
            Opened::Postgres(s) => s.close().await,
        }
    }
}

/// The file of a SQLite URL, when it names one (not `:memory:`).
pub fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    use std::str::FromStr;
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url).ok()?;
    let file = options.get_filename();
    (file.as_os_str() != ":memory:").then(|| file.to_path_buf())
}

/// The columns of `table` with what each takes, in order.
async fn columns(db: &Db, table: &str) -> Result<Vec<(String, Kind)>, CopyError> {
    let rows: Vec<(String, String)> = match db {
        Db::Sqlite { read, .. } => sqlx::query_as("SELECT name, type FROM pragma_table_info(?1)")
            .bind(table)
            .fetch_all(read)
            .await
            .map_err(failed(format!("reading the columns of {table}")))?,
        Db::Postgres(pool) => sqlx::query_as(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
        )
        .bind(table)
        .fetch_all(pool)
        .await
        .map_err(failed(format!("reading the columns of {table}")))?,
    };
    Ok(rows
        .into_iter()
        .map(|(name, declared)| (name, Kind::of(&declared)))
        .collect())
}

/// Rows in `table` on the target (the writer: what this copy committed).
async fn count(db: &Db, table: &str, writer: bool) -> Result<i64, CopyError> {
    let sql = format!("SELECT COUNT(*) FROM {table}");
    let context = || format!("counting the rows of {table}");
    match db {
        Db::Sqlite { read, write } => {
            let pool = if writer { write } else { read };
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_one(pool)
                .await
                .map_err(failed(context()))
        }
        Db::Postgres(pool) => sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(pool)
            .await
            .map_err(failed(context())),
    }
}

/// Whether the database is the target of a copy that did not finish.
pub async fn unfinished_copy(store: &dyn super::Store) -> Result<bool, StoreError> {
    Ok(!store.leases(COPY_MARKER).await?.is_empty())
}

/// Copies everything from `from` to `to` (see the module); `say` gets a progress line per
/// table. Returns the rows per table on both sides.
pub async fn copy(
    from: &str,
    to: &str,
    say: &mut (dyn FnMut(String) + Send),
) -> Result<Vec<TableCopied>, CopyError> {
    if from.trim() == to.trim() {
        return Err(CopyError::SameDatabase);
    }
    // both URLs are checked before anything is opened (or created)
    let (from_backend, _) = (Backend::of(from)?, Backend::of(to)?);
    if from_backend == Backend::Sqlite
        && let Some(file) = sqlite_file(from)
        && !file.exists()
    {
        return Err(CopyError::NoSource(file.display().to_string()));
    }
    let source = Opened::open(from).await?;
    let target = match Opened::open(to).await {
        Ok(target) => target,
        Err(e) => {
            source.close().await;
            return Err(e);
        }
    };
    let result = copy_between(source.db(), target.db(), say).await;
    source.close().await;
    target.close().await;
    result
}

async fn copy_between(
    source: &Db,
    target: &Db,
    say: &mut (dyn FnMut(String) + Send),
) -> Result<Vec<TableCopied>, CopyError> {
    if has_marker(source).await? {
        return Err(CopyError::SourceUnfinished);
    }
    prepare_target(target, say).await?;
    let mut snapshot = Snapshot::open(source).await?;
    let mut read = HashMap::new();
    for table in TABLES {
        let rows = copy_table(source, target, table, snapshot.reader()).await?;
        say(format!("{table}: {rows} rows"));
        read.insert(*table, rows);
    }
    snapshot.end().await?;
    move_ids_on(target).await?;
    super::db::query("DELETE FROM leases WHERE name = $1")
        .bind(COPY_MARKER)
        .execute(target.write())
        .await
        .map_err(failed("ending the copy"))?;
    compare_counts(target, &read).await
}

/// Whether `db` carries the marker of a copy into it that did not finish.
async fn has_marker(db: &Db) -> Result<bool, CopyError> {
    super::db::query("SELECT name FROM leases WHERE name = $1")
        .bind(COPY_MARKER)
        .fetch_optional(db.write())
        .await
        .map(|r| r.is_some())
        .map_err(failed("reading the copy marker"))
}

/// The target made ready: empty (what a killed copy wrote goes; data of any other kind
/// refuses the copy, nothing written), then marked as a copy in progress.
async fn prepare_target(
    target: &Db,
    say: &mut (dyn FnMut(String) + Send),
) -> Result<(), CopyError> {
    if has_marker(target).await? {
        say(
            "a copy into this database did not finish: emptying what it wrote, then copying again"
                .into(),
        );
        let statements = TABLES
            .iter()
            .rev()
            .map(|t| super::db::query(format!("DELETE FROM {t}")))
            .collect();
        target
            .transaction(statements)
            .await
            .map_err(failed("emptying an unfinished copy"))?;
    } else {
        for table in TABLES {
            let rows = count(target, table, true).await?;
            if rows > 0 {
                return Err(CopyError::TargetNotEmpty {
                    table: table.to_string(),
                    rows,
                });
            }
        }
    }
    super::db::query(
        "INSERT INTO leases (name, holder, expires_ms) VALUES ($1, 'kaiwa db copy', $2)",
    )
    .bind(COPY_MARKER)
    .bind(i64::MAX)
    .execute(target.write())
    .await
    .map_err(failed("marking the copy in progress"))?;
    Ok(())
}

/// PostgreSQL's identity sequences moved past the ids copied (nothing to do on SQLite).
async fn move_ids_on(target: &Db) -> Result<(), CopyError> {
    let Db::Postgres(pool) = target else {
        return Ok(());
    };
    for table in TABLES {
        let has_id = columns(target, table)
            .await?
            .iter()
            .any(|(name, _)| name == "id");
        if has_id {
            let sql = format!(
                "SELECT setval(pg_get_serial_sequence('{table}', 'id'), GREATEST((SELECT MAX(id) FROM {table}), 1))"
            );
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(pool)
                .await
                .map_err(failed(format!("moving the ids of {table} on")))?;
        }
    }
    Ok(())
}

/// Every table's rows on the target against those read from the source.
async fn compare_counts(
    target: &Db,
    read: &HashMap<&str, u64>,
) -> Result<Vec<TableCopied>, CopyError> {
    let mut copied = Vec::with_capacity(TABLES.len());
    let mut differ = Vec::new();
    for table in TABLES {
        let source_rows = read.get(table).copied().unwrap_or_default() as i64;
        let target_rows = count(target, table, true).await?;
        if source_rows != target_rows {
            differ.push(format!(
                "{table}: {source_rows} in the source, {target_rows} copied"
            ));
        }
        copied.push(TableCopied {
            table: table.to_string(),
            source_rows,
            target_rows,
        });
    }
    if !differ.is_empty() {
        return Err(CopyError::Counts(differ.join("; ")));
    }
    Ok(copied)
}

/// The source read in one snapshot: a read transaction (SQLite's WAL keeps what it saw;
/// PostgreSQL at `REPEATABLE READ`).
enum Snapshot {
    Sqlite(sqlx::Transaction<'static, Sqlite>),
    Postgres(sqlx::Transaction<'static, Postgres>),
}

impl Snapshot {
    async fn open(source: &Db) -> Result<Snapshot, CopyError> {
        Ok(match source {
            Db::Sqlite { read, .. } => {
                Snapshot::Sqlite(read.begin().await.map_err(failed("reading the source"))?)
            }
            Db::Postgres(pool) => {
                let mut tx = pool.begin().await.map_err(failed("reading the source"))?;
                sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    .execute(&mut *tx)
                    .await
                    .map_err(failed("taking a snapshot of the source"))?;
                Snapshot::Postgres(tx)
            }
        })
    }

    fn reader(&mut self) -> SourceTx<'_> {
        match self {
            Snapshot::Sqlite(tx) => SourceTx::Sqlite(tx),
            Snapshot::Postgres(tx) => SourceTx::Postgres(tx),
        }
    }

    async fn end(self) -> Result<(), CopyError> {
        match self {
            Snapshot::Sqlite(tx) => tx.rollback().await,
            Snapshot::Postgres(tx) => tx.rollback().await,
        }
        .map_err(failed("ending the read"))
    }
}

/// The source's read transaction (its snapshot).
enum SourceTx<'a> {
    Sqlite(&'a mut sqlx::Transaction<'static, Sqlite>),
    Postgres(&'a mut sqlx::Transaction<'static, Postgres>),
}

/// How `table`'s rows are ordered on the source: by id, the inbox in the order it was kept.
fn order_of(table: &str, source: &Db, columns: &[(String, Kind)]) -> String {
    if table == "inbox" {
        format!(" ORDER BY created_ms, {}", source.inbox_order())
    } else if columns.iter().any(|(c, _)| c == "id") {
        " ORDER BY id".into()
    } else {
        String::new()
    }
}

/// Copies one table from the source's snapshot; the rows read.
async fn copy_table(
    source: &Db,
    target: &Db,
    table: &str,
    tx: SourceTx<'_>,
) -> Result<u64, CopyError> {
    let theirs = columns(source, table).await?;
    let ours = columns(target, table).await?;
    // what both have (PostgreSQL's inbox numbers its rows itself)
    let shared: Vec<(String, Kind)> = ours
        .into_iter()
        .filter(|(name, _)| name != "seq" && theirs.iter().any(|(n, _)| n == name))
        .collect();
    if shared.is_empty() {
        return Ok(0);
    }
    let names: Vec<String> = shared
        .iter()
        .map(|(name, _)| {
            if POINTERS.contains(&(table, name.as_str())) {
                // a pointer to a session that is not there (deleted while the row was written)
                // is read as none: a target with the foreign key would refuse it
                format!("(SELECT s.id FROM sessions s WHERE s.id = {table}.{name}) AS {name}")
            } else {
                name.clone()
            }
        })
        .collect();
    let mut sql = format!("SELECT {} FROM {table}", names.join(", "));
    if table == "leases" {
        sql.push_str(&format!(" WHERE name <> '{COPY_MARKER}'"));
    }
    sql.push_str(&order_of(table, source, &theirs));
    let mut batch: Vec<Vec<Value>> = Vec::with_capacity(BATCH);
    let mut read = 0u64;
    let context = || format!("reading {table}");
    match tx {
        SourceTx::Sqlite(tx) => {
            let mut rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch(&mut **tx);
            while let Some(row) = rows.try_next().await.map_err(failed(context()))? {
                batch.push(sqlite_values(&row, &shared).map_err(failed(context()))?);
                read += 1;
                if batch.len() == BATCH {
                    write_batch(target, table, &shared, std::mem::take(&mut batch)).await?;
                }
            }
        }
        SourceTx::Postgres(tx) => {
            let mut rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch(&mut **tx);
            while let Some(row) = rows.try_next().await.map_err(failed(context()))? {
                batch.push(pg_values(&row, &shared).map_err(failed(context()))?);
                read += 1;
                if batch.len() == BATCH {
                    write_batch(target, table, &shared, std::mem::take(&mut batch)).await?;
                }
            }
        }
    }
    if !batch.is_empty() {
        write_batch(target, table, &shared, batch).await?;
    }
    Ok(read)
}

fn sqlite_values(
    row: &sqlx::sqlite::SqliteRow,
    columns: &[(String, Kind)],
) -> Result<Vec<Value>, sqlx::Error> {
    let mut values = Vec::with_capacity(columns.len());
    for (i, (_, kind)) in columns.iter().enumerate() {
        let raw = row.try_get_raw(i)?;
        let value = if raw.is_null() {
            Value::Null
        } else {
            match raw.type_info().name() {
                "INTEGER" | "BOOLEAN" => Value::Int(row.try_get(i)?),
                "REAL" => Value::Real(row.try_get(i)?),
                "BLOB" => Value::Bytes(row.try_get(i)?),
                _ => Value::Text(row.try_get(i)?),
            }
        };
        values.push(coerce(value, *kind));
    }
    Ok(values)
}

fn pg_values(
    row: &sqlx::postgres::PgRow,
    columns: &[(String, Kind)],
) -> Result<Vec<Value>, sqlx::Error> {
    let mut values = Vec::with_capacity(columns.len());
    for (i, (_, kind)) in columns.iter().enumerate() {
        let raw = row.try_get_raw(i)?;
        let value = if raw.is_null() {
            Value::Null
        } else {
            match raw.type_info().name() {
                "INT8" => Value::Int(row.try_get(i)?),
                "INT4" => Value::Int(i64::from(row.try_get::<i32, _>(i)?)),
                "BOOL" => Value::Bool(row.try_get(i)?),
                "FLOAT8" => Value::Real(row.try_get(i)?),
                "BYTEA" => Value::Bytes(row.try_get(i)?),
                _ => Value::Text(row.try_get(i)?),
            }
        };
        values.push(coerce(value, *kind));
    }
    Ok(values)
}

/// One batch of rows into the target, in one transaction.
async fn write_batch(
    target: &Db,
    table: &str,
    columns: &[(String, Kind)],
    rows: Vec<Vec<Value>>,
) -> Result<(), CopyError> {
    let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
    let head = format!("INSERT INTO {table} ({}) ", names.join(", "));
    let context = || format!("writing {table}");
    match target {
        Db::Sqlite { write, .. } => {
            let mut insert = QueryBuilder::<Sqlite>::new(head);
            insert.push_values(rows, |mut b, row| {
                for value in row {
                    match value {
                        Value::Null => b.push_bind(None::<i64>),
                        Value::Int(v) => b.push_bind(v),
                        Value::Real(v) => b.push_bind(v),
                        Value::Text(v) => b.push_bind(v),
                        Value::Bytes(v) => b.push_bind(v),
                        Value::Bool(v) => b.push_bind(i64::from(v)),
                    };
                }
            });
            let mut tx = write.begin().await.map_err(failed(context()))?;
            insert
                .build()
                .execute(&mut *tx)
                .await
                .map_err(failed(context()))?;
            tx.commit().await.map_err(failed(context()))?;
        }
        Db::Postgres(pool) => {
            let kinds: Vec<Kind> = columns.iter().map(|(_, k)| *k).collect();
            let mut insert = QueryBuilder::<Postgres>::new(head);
            insert.push_values(rows, |mut b, row| {
                for (value, kind) in row.into_iter().zip(&kinds) {
                    match (value, kind) {
                        (Value::Null, Kind::Int) => b.push_bind(None::<i64>),
                        (Value::Null, Kind::Bool) => b.push_bind(None::<bool>),
                        (Value::Null, Kind::Bytes) => b.push_bind(None::<Vec<u8>>),
                        (Value::Null, Kind::Real) => b.push_bind(None::<f64>),
                        (Value::Null, Kind::Text) => b.push_bind(None::<String>),
                        (Value::Int(v), _) => b.push_bind(v),
                        (Value::Real(v), _) => b.push_bind(v),
                        (Value::Text(v), _) => b.push_bind(v.replace('\0', "\u{FFFD}")),
                        (Value::Bytes(v), _) => b.push_bind(v),
                        (Value::Bool(v), _) => b.push_bind(v),
                    };
                }
            });
            let mut tx = pool.begin().await.map_err(failed(context()))?;
            insert
                .build()
                .execute(&mut *tx)
                .await
                .map_err(failed(context()))?;
            tx.commit().await.map_err(failed(context()))?;
        }
    }
    Ok(())
}

/// A consistent copy of the SQLite database `url` into the new file `path` (`VACUUM INTO`,
/// on a reader: the bot may keep writing), compacted.
pub async fn backup_sqlite(url: &str, path: &std::path::Path) -> Result<(), CopyError> {
    let store = SqliteStore::connect(url).await?;
    let Db::Sqlite { read, .. } = store.db() else {
        return Ok(());
    };
    let done = sqlx::query("VACUUM INTO ?1")
        .bind(path.display().to_string())
        .execute(read)
        .await
        .map_err(failed(format!("writing {}", path.display())));
    use super::Store;
    store.close().await;
    done.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model call or processed update that points at a session no longer there (on
    /// PostgreSQL nothing refuses one written while `/forget` deleted its session) is
    /// copied pointing at none, into a SQLite file whose foreign keys would refuse it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pointer_to_a_session_gone_is_copied_as_none() {
        let url = crate::testing::postgres::database_url().await;
        let source = Opened::open(&url).await.expect("postgres");
        let Db::Postgres(pool) = source.db() else {
            panic!("a PostgreSQL store")
        };
        sqlx::query(
            "INSERT INTO llm_calls (session_id, agent, model, prompt_tokens, completion_tokens, \
             latency_ms, error, created_ms, wasted) VALUES (424242, 'reviewer', 'm', 1, 1, 1, NULL, 1, FALSE)",
        )
        .execute(pool)
        .await
        .expect("a model call of a session gone");
        sqlx::query(
            "INSERT INTO processed_updates (platform, chat, message_id, session_id, created_ms) \
             VALUES ('telegram', '7', '8', 424242, 1)",
        )
        .execute(pool)
        .await
        .expect("an update of a session gone");
        source.close().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let target = format!("sqlite://{}/copy.db", dir.path().display());
        let copied = copy(&url, &target, &mut |_| {}).await.expect("copies");
        assert!(
            copied.iter().all(|t| t.source_rows == t.target_rows),
            "{copied:?}"
        );
        let store = crate::store::connect(&target).await.expect("opens");
        let ledger = store.llm_calls(None).await.expect("ledger");
        assert_eq!(ledger.len(), 1, "{ledger:?}");
        assert_eq!(ledger[0].session_id, None);
        assert!(
            store
                .is_processed(crate::message::Platform::Telegram, "7", "8")
                .await
                .expect("reads")
        );
        store.close().await;
    }

    /// Every table of both schemas is in [`TABLES`] (a migration that adds one adds it
    /// there, or the copy would leave it behind).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_table_of_both_schemas_is_copied() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sqlite = Opened::open(&format!("sqlite://{}/t.db", dir.path().display()))
            .await
            .expect("sqlite");
        let postgres = Opened::open(&crate::testing::postgres::database_url().await)
            .await
            .expect("postgres");
        let mut wanted: Vec<&str> = TABLES.to_vec();
        wanted.sort_unstable();
        let Db::Sqlite { read, .. } = sqlite.db() else {
            panic!("a SQLite store")
        };
        let mut theirs: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
             AND name <> '_sqlx_migrations' ORDER BY name",
        )
        .fetch_all(read)
        .await
        .expect("tables");
        theirs.sort();
        assert_eq!(theirs, wanted, "SQLite");
        let Db::Postgres(pool) = postgres.db() else {
            panic!("a PostgreSQL store")
        };
        let mut theirs: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() \
             AND table_name <> '_sqlx_migrations'",
        )
        .fetch_all(pool)
        .await
        .expect("tables");
        theirs.sort();
        assert_eq!(theirs, wanted, "PostgreSQL");
        sqlite.close().await;
        postgres.close().await;
    }
}
