//! Settings: `config/kaiwa.toml` (path from `--config` / `KAIWA_CONFIG`), then the
//! environment (`KAIWA_DATABASE_URL`). The only place that reads files of configuration and
//! environment variables; libraries get plain values. A missing secret fails at start-up and
//! names the variable, never its value.

use anyhow::{Context, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

pub const DEFAULT_DATABASE_URL: &str = "sqlite://data/kaiwa.db";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(default = "default_database_url")]
    pub database_url: String,
    #[serde(default)]
    pub flows: FlowSettings,
    /// Absent: every agent uses its rule-based floor.
    pub llm: Option<LlmSettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            database_url: default_database_url(),
            flows: FlowSettings::default(),
            llm: None,
        }
    }
}

fn default_database_url() -> String {
    DEFAULT_DATABASE_URL.to_string()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSettings {
    /// The flow a new conversation starts with when its place names none.
    pub default: Option<String>,
    /// Folder of interview forms (`<id>.toml`), relative to the working directory.
    #[serde(default = "default_forms_dir")]
    pub forms_dir: String,
    /// The form an interview uses when none is named.
    pub default_form: Option<String>,
    /// The help-desk knowledge base: `*.md` and `*.txt` files under this folder.
    #[serde(default = "default_kb_dir")]
    pub kb_dir: String,
    /// The reading companion's book catalogue.
    #[serde(default = "default_books")]
    pub books: String,
}

impl Default for FlowSettings {
    fn default() -> Self {
        FlowSettings {
            default: None,
            forms_dir: default_forms_dir(),
            default_form: None,
            kb_dir: default_kb_dir(),
            books: default_books(),
        }
    }
}

fn default_books() -> String {
    "config/books.toml".into()
}

fn default_kb_dir() -> String {
    "config/kb".into()
}

fn default_forms_dir() -> String {
    "config/forms".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    /// An OpenAI-compatible endpoint, e.g. `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    pub model: String,
    /// The environment variable that holds the API key (none for local servers).
    pub api_key_env: Option<String>,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// Set for servers that accept `tool_choice: "required"`.
    #[serde(default)]
    pub supports_required_tool_choice: bool,
    /// Per-agent overrides: `[llm.agents.quick_check] model = "small-model"`.
    #[serde(default)]
    pub agents: BTreeMap<String, AgentLlmSettings>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentLlmSettings {
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub timeout_secs: Option<u64>,
}

fn default_timeout() -> u64 {
    60
}

fn default_retries() -> u32 {
    3
}

impl Settings {
    /// Reads `path`. A missing file is an error only when `required` (the path was given
    /// explicitly); otherwise the built-in defaults apply.
    pub fn load(path: &Path, required: bool) -> anyhow::Result<Settings> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                return Ok(Settings::default());
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("cannot read the configuration file {}", path.display())
                });
            }
        };
        let settings: Settings = toml::from_str(&text)
            .with_context(|| format!("invalid configuration in {}", path.display()))?;
        settings.validate()?;
        Ok(settings)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(llm) = &self.llm {
            if llm.model.trim().is_empty() {
                bail!("[llm] model is empty");
            }
            if !(llm.base_url.starts_with("http://") || llm.base_url.starts_with("https://")) {
                bail!(
                    "[llm] base_url must start with http:// or https:// (got {:?})",
                    llm.base_url
                );
            }
            if llm.timeout_secs == 0 {
                bail!("[llm] timeout_secs must be at least 1");
            }
        }
        Ok(())
    }
}

/// Reads the secret named by `var`; an unset variable is an error that names it.
pub fn secret_from_env(var: &str) -> anyhow::Result<String> {
    match std::env::var(var) {
        Ok(value) if !value.trim().is_empty() => Ok(value),
        _ => bail!("the environment variable {var} is not set (it should hold the API key)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_apply_without_a_file() {
        let s = Settings::load(Path::new("/nonexistent/kaiwa.toml"), false).expect("defaults");
        assert_eq!(s.database_url, DEFAULT_DATABASE_URL);
        assert!(s.llm.is_none());
        assert!(Settings::load(Path::new("/nonexistent/kaiwa.toml"), true).is_err());
    }

    #[test]
    fn llm_section_and_agent_overrides_parse() {
        let s: Settings = toml::from_str(
            r#"
            [llm]
            base_url = "http://127.0.0.1:11434/v1"
            model = "big"
            [llm.agents.quick_check]
            model = "small"
            "#,
        )
        .expect("parses");
        let llm = s.llm.expect("llm");
        assert_eq!(llm.timeout_secs, 60);
        assert_eq!(llm.agents["quick_check"].model.as_deref(), Some("small"));
    }

    #[test]
    fn typos_are_rejected() {
        assert!(toml::from_str::<Settings>("databse_url = \"x\"").is_err());
    }
}
