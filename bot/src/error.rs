//! [`Error`]: what can go wrong opening or running Kaiwa, for a host bot to match on.

use kaiwa_adapters::AdapterError;
use kaiwa_core::store::StoreError;

/// The source of an error that has no type of its own (a form file, the knowledge base).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An error of the `kaiwa` library: [`crate::Kaiwa`], [`crate::KaiwaBuilder`],
/// [`crate::Options`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration file cannot be read, is not valid, or names what is not there.
    #[error("configuration: {0}")]
    Config(#[source] BoxError),
    /// The database cannot be opened, migrated or written.
    #[error("database {url}: {source}")]
    Database {
        /// The database URL, without a password.
        url: String,
        #[source]
        source: StoreError,
    },
    /// Forms, the knowledge base, the book catalogue or the model settings are not usable.
    #[error("{what}: {source}")]
    Setup {
        what: &'static str,
        #[source]
        source: BoxError,
    },
    /// Kaiwa was asked for a platform it has no token for.
    #[error("no {platform} token (set the variable {variable} names)")]
    NoToken {
        platform: &'static str,
        variable: &'static str,
    },
    /// No flow of that name is enabled.
    #[error("unknown flow {flow:?}; available: {available}")]
    UnknownFlow { flow: String, available: String },
    /// `kaiwa run` was started with no platform token set.
    #[error(
        "no chat platform is configured: set {telegram} (a Telegram bot token), {discord} (a \
         Discord bot token) or {slack} (a Slack bot token) to run the bot; `kaiwa chat <flow>` \
         talks to the flows in this terminal instead"
    )]
    NoPlatform {
        telegram: String,
        discord: String,
        slack: String,
    },
    #[error(
        "database {url} is the target of a `kaiwa db copy` that did not finish: run that copy again (it starts over) before kaiwa run"
    )]
    UnfinishedCopy { url: String },
    /// A platform adapter failed (it could not connect, or stopped).
    #[error("{platform}: {source}")]
    Platform {
        platform: &'static str,
        #[source]
        source: AdapterError,
    },
    /// The health and metrics server could not listen.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
    /// A platform adapter stopped while the bot ran (the bot stopped with it).
    #[error("{0}")]
    Stopped(String),
    /// The terminal conversation stopped (its input or output failed).
    #[error("the console conversation stopped: {0}")]
    Console(#[source] AdapterError),
}

impl Error {
    /// An error of the set-up (`what`: forms, knowledge base, …) from an untyped one.
    pub(crate) fn setup(what: &'static str) -> impl FnOnce(anyhow::Error) -> Error {
        move |e| Error::Setup {
            what,
            source: e.into(),
        }
    }

    /// A configuration error from an untyped one.
    pub(crate) fn config(e: anyhow::Error) -> Error {
        Error::Config(e.into())
    }
}
