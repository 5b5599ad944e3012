//! The dialect layer under the queries both backends run ([`super::queries`]): the pool
//! ([`Db`], and [`Pool`] for reads or writes), a statement with its arguments ([`query`],
//! written with PostgreSQL's numbered placeholders `$1`, which SQLite is given as `?1`), and
//! the rows that come back ([`Row`], read by name through [`Columns`] or by position).
//! Where the two SQL dialects differ in more than placeholders (JSON built by the
//! database), [`Db`] says how ([`Db::json_object`], [`Db::json_array_of`]). What only one
//! backend has (SQLite's writer thread and WAL, PostgreSQL's group commit) is not here:
//! it lives in that backend's folder.

use super::StoreError;
use super::rows::Columns;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{AssertSqlSafe, PgPool, Postgres, Sqlite, SqlitePool};

/// The database under a store.
#[derive(Clone)]
pub(crate) enum Db {
    /// Readers beside the one writer connection (WAL).
    Sqlite {
        read: SqlitePool,
        write: SqlitePool,
    },
    Postgres(PgPool),
}

/// Where a statement runs.
#[derive(Clone, Copy)]
pub(crate) enum Pool<'a> {
    Sqlite(&'a SqlitePool),
    Postgres(&'a PgPool),
}

impl Db {
    /// Where reads go (SQLite: a reader, never blocked by the writer).
    pub(crate) fn read(&self) -> Pool<'_> {
        match self {
            Db::Sqlite { read, .. } => Pool::Sqlite(read),
            Db::Postgres(pool) => Pool::Postgres(pool),
        }
    }

    /// Where writes go, and the reads that must see the last write.
    pub(crate) fn write(&self) -> Pool<'_> {
        match self {
            Db::Sqlite { write, .. } => Pool::Sqlite(write),
            Db::Postgres(pool) => Pool::Postgres(pool),
        }
    }

    /// The function that builds a JSON object from `key, value, …` pairs.
    pub(crate) fn json_object(&self) -> &'static str {
        match self {
            Db::Sqlite { .. } => "json_object",
            Db::Postgres(_) => "json_build_object",
        }
    }

    /// The function that builds a JSON array from its arguments.
    pub(crate) fn json_array(&self) -> &'static str {
        match self {
            Db::Sqlite { .. } => "json_array",
            Db::Postgres(_) => "json_build_array",
        }
    }

    /// An aggregate: the JSON array of `expr` over the rows (`[]` for none).
    pub(crate) fn json_array_of(&self, expr: &str) -> String {
        match self {
            Db::Sqlite { .. } => format!("json_group_array({expr})"),
            Db::Postgres(_) => format!("COALESCE(json_agg({expr}), '[]'::json)"),
        }
    }

    /// A column holding JSON text, as JSON inside a built object.
    pub(crate) fn json_of(&self, column: &str) -> String {
        match self {
            Db::Sqlite { .. } => format!("json({column})"),
            Db::Postgres(_) => format!("{column}::json"),
        }
    }

    /// The condition "not delivered" on `messages` (`alias.` prefixed), as each backend's
    /// partial index of undelivered messages is written (SQLite uses an index only for the
    /// condition it was made with).
    pub(crate) fn not_delivered(&self, alias: &str) -> String {
        match self {
            Db::Sqlite { .. } => format!("{alias}delivered = 0"),
            Db::Postgres(_) => format!("NOT {alias}delivered"),
        }
    }

    /// The inbox's order of keeping, after its time: SQLite's row id, PostgreSQL's identity.
    pub(crate) fn inbox_order(&self) -> &'static str {
        match self {
            Db::Sqlite { .. } => "rowid",
            Db::Postgres(_) => "seq",
        }
    }

    /// Runs `statements` in one transaction on the writer; returns the rows each changed.
    pub(crate) async fn transaction(
        &self,
        statements: Vec<Query<'_>>,
    ) -> Result<Vec<u64>, sqlx::Error> {
        let mut changed = Vec::with_capacity(statements.len());
        match self.write() {
            Pool::Sqlite(pool) => {
                let mut tx = pool.begin().await?;
                for statement in statements {
                    changed.push(statement.sqlite().execute(&mut *tx).await?.rows_affected());
                }
                tx.commit().await?;
            }
            Pool::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                for statement in statements {
                    changed.push(
                        statement
                            .postgres()
                            .execute(&mut *tx)
                            .await?
                            .rows_affected(),
                    );
                }
                tx.commit().await?;
            }
        }
        Ok(changed)
    }
}

/// A value bound to a statement.
pub(crate) enum Arg<'a> {
    Text(&'a str),
    Owned(String),
    MaybeText(Option<&'a str>),
    Int(i64),
    MaybeInt(Option<i64>),
    Bool(bool),
    Bytes(&'a [u8]),
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Arg::Text(v)
    }
}
impl<'a> From<&'a String> for Arg<'a> {
    fn from(v: &'a String) -> Self {
        Arg::Text(v)
    }
}
impl From<String> for Arg<'_> {
    fn from(v: String) -> Self {
        Arg::Owned(v)
    }
}
impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(v: Option<&'a str>) -> Self {
        Arg::MaybeText(v)
    }
}
impl<'a> From<&'a Option<String>> for Arg<'a> {
    fn from(v: &'a Option<String>) -> Self {
        Arg::MaybeText(v.as_deref())
    }
}
impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(v)
    }
}
impl From<Option<i64>> for Arg<'_> {
    fn from(v: Option<i64>) -> Self {
        Arg::MaybeInt(v)
    }
}
impl From<bool> for Arg<'_> {
    fn from(v: bool) -> Self {
        Arg::Bool(v)
    }
}
impl<'a> From<&'a [u8]> for Arg<'a> {
    fn from(v: &'a [u8]) -> Self {
        Arg::Bytes(v)
    }
}
impl<'a> From<&'a Vec<u8>> for Arg<'a> {
    fn from(v: &'a Vec<u8>) -> Self {
        Arg::Bytes(v)
    }
}

/// A statement (PostgreSQL's `$1` placeholders) and its arguments, in placeholder order.
pub(crate) struct Query<'a> {
    sql: std::borrow::Cow<'a, str>,
    args: Vec<Arg<'a>>,
}

/// `sql` with no arguments yet.
pub(crate) fn query<'a>(sql: impl Into<std::borrow::Cow<'a, str>>) -> Query<'a> {
    Query {
        sql: sql.into(),
        args: Vec::new(),
    }
}

type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments>;
type PgQuery<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;

impl<'a> Query<'a> {
    pub(crate) fn bind(mut self, arg: impl Into<Arg<'a>>) -> Self {
        self.args.push(arg.into());
        self
    }

    fn sqlite(self) -> SqliteQuery<'a> {
        // `$1` as SQLite numbers its placeholders (`?1`): no statement here has a `$`
        // elsewhere
        let mut query = sqlx::query(AssertSqlSafe(self.sql.replace('$', "?")));
        for arg in self.args {
            query = match arg {
                Arg::Text(v) => query.bind(v),
                Arg::Owned(v) => query.bind(v),
                Arg::MaybeText(v) => query.bind(v),
                Arg::Int(v) => query.bind(v),
                Arg::MaybeInt(v) => query.bind(v),
                Arg::Bool(v) => query.bind(v),
                Arg::Bytes(v) => query.bind(v),
            };
        }
        query
    }

    fn postgres(self) -> PgQuery<'a> {
        let mut query = sqlx::query(AssertSqlSafe(self.sql.into_owned()));
        for arg in self.args {
            // a PostgreSQL text may not hold NUL: it becomes U+FFFD
            let clean = |v: &str| v.replace('\0', "\u{FFFD}");
            query = match arg {
                Arg::Text(v) if v.contains('\0') => query.bind(clean(v)),
                Arg::Text(v) => query.bind(v),
                Arg::Owned(v) => query.bind(v.replace('\0', "\u{FFFD}")),
                Arg::MaybeText(Some(v)) if v.contains('\0') => query.bind(Some(clean(v))),
                Arg::MaybeText(v) => query.bind(v),
                Arg::Int(v) => query.bind(v),
                Arg::MaybeInt(v) => query.bind(v),
                Arg::Bool(v) => query.bind(v),
                Arg::Bytes(v) => query.bind(v),
            };
        }
        query
    }

    pub(crate) async fn fetch_all(self, pool: Pool<'_>) -> Result<Vec<Row>, sqlx::Error> {
        Ok(match pool {
            Pool::Sqlite(pool) => self
                .sqlite()
                .fetch_all(pool)
                .await?
                .into_iter()
                .map(Row::Sqlite)
                .collect(),
            Pool::Postgres(pool) => self
                .postgres()
                .fetch_all(pool)
                .await?
                .into_iter()
                .map(Row::Postgres)
                .collect(),
        })
    }

    pub(crate) async fn fetch_optional(self, pool: Pool<'_>) -> Result<Option<Row>, sqlx::Error> {
        Ok(match pool {
            Pool::Sqlite(pool) => self.sqlite().fetch_optional(pool).await?.map(Row::Sqlite),
            Pool::Postgres(pool) => self
                .postgres()
                .fetch_optional(pool)
                .await?
                .map(Row::Postgres),
        })
    }

    pub(crate) async fn fetch_one(self, pool: Pool<'_>) -> Result<Row, sqlx::Error> {
        Ok(match pool {
            Pool::Sqlite(pool) => Row::Sqlite(self.sqlite().fetch_one(pool).await?),
            Pool::Postgres(pool) => Row::Postgres(self.postgres().fetch_one(pool).await?),
        })
    }

    /// Runs the statement; the rows it changed.
    pub(crate) async fn execute(self, pool: Pool<'_>) -> Result<u64, sqlx::Error> {
        Ok(match pool {
            Pool::Sqlite(pool) => self.sqlite().execute(pool).await?.rows_affected(),
            Pool::Postgres(pool) => self.postgres().execute(pool).await?.rows_affected(),
        })
    }
}

/// A row of either backend.
pub(crate) enum Row {
    Sqlite(SqliteRow),
    Postgres(PgRow),
}

impl Row {
    /// The value of column `index` (0-based).
    pub(crate) fn at<T>(&self, index: usize) -> Result<T, sqlx::Error>
    where
        T: for<'r> sqlx::Decode<'r, Sqlite>
            + sqlx::Type<Sqlite>
            + for<'r> sqlx::Decode<'r, Postgres>
            + sqlx::Type<Postgres>,
    {
        match self {
            Row::Sqlite(row) => sqlx::Row::try_get(row, index),
            Row::Postgres(row) => sqlx::Row::try_get(row, index),
        }
    }
}

impl Columns for Row {
    fn text(&self, column: &str) -> Result<String, sqlx::Error> {
        match self {
            Row::Sqlite(row) => row.text(column),
            Row::Postgres(row) => row.text(column),
        }
    }
    fn maybe_text(&self, column: &str) -> Result<Option<String>, sqlx::Error> {
        match self {
            Row::Sqlite(row) => row.maybe_text(column),
            Row::Postgres(row) => row.maybe_text(column),
        }
    }
    fn int(&self, column: &str) -> Result<i64, sqlx::Error> {
        match self {
            Row::Sqlite(row) => row.int(column),
            Row::Postgres(row) => row.int(column),
        }
    }
    fn maybe_int(&self, column: &str) -> Result<Option<i64>, sqlx::Error> {
        match self {
            Row::Sqlite(row) => row.maybe_int(column),
            Row::Postgres(row) => row.maybe_int(column),
        }
    }
    fn flag(&self, column: &str) -> Result<bool, sqlx::Error> {
        match self {
            Row::Sqlite(row) => row.flag(column),
            Row::Postgres(row) => row.flag(column),
        }
    }
}

/// A store whose shared queries ([`super::queries`]) run on `db`: each backend says where
/// its database is, and the traits written once there are its own.
pub(crate) trait OnDb: Send + Sync {
    fn db(&self) -> &Db;

    /// Where leases are taken, renewed and let go: the writer, unless the backend has a
    /// connection whose commits need not wait for the disk (a lease is a promise that
    /// expires; what keeps a stale holder from writing is the session's version, checked
    /// by every turn's durable commit).
    fn leasing(&self) -> Pool<'_> {
        self.db().write()
    }
}

/// `context` for an error of a shared query.
pub(crate) fn failed(context: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    StoreError::db(context)
}
