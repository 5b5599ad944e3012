//! Starting Kaiwa as every deployment does, through [`kaiwa::Kaiwa`]: a configuration file
//! (the forms of these tests, this repository's knowledge base and books) and the section
//! of the platform under test.

use kaiwa::Kaiwa;
use kaiwa_core::llm::ModelRouter;
use std::path::Path;

const ENGINEER: &str = include_str!("../../../config/forms/engineer.toml");

/// Kaiwa from a configuration file written in `dir` with `sections` (its `[telegram]` or
/// `[discord]`, …), on the database `database_url`, with the tokens given and `models` in
/// place of `[llm]`'s clients (`[llm]`, when there, still sets the turn budget).
pub async fn kaiwa(
    dir: &Path,
    sections: &str,
    database_url: &str,
    tokens: (Option<&str>, Option<&str>),
    models: ModelRouter,
) -> Kaiwa {
    let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let forms = dir.join("forms");
    std::fs::create_dir_all(&forms).expect("forms folder");
    std::fs::write(forms.join("engineer.toml"), ENGINEER).expect("engineer form");
    std::fs::write(forms.join("survey.toml"), kaiwa_tests::SURVEY_FORM).expect("survey form");
    let config = format!(
        "[flows]\nforms_dir = {forms:?}\ndefault_form = \"engineer\"\n\
         kb_dir = \"{repo}/config/kb\"\nbooks = \"{repo}/config/books.toml\"\n\n\
         [server]\nlisten = \"127.0.0.1:0\"\n\n{sections}"
    );
    let path = dir.join("kaiwa.toml");
    std::fs::write(&path, config).expect("config written");
    let options = kaiwa::Options {
        config: Some(path),
        database_url: Some(database_url.to_string()),
    };
    let (settings, _) = options.settings().expect("settings");
    let mut builder = Kaiwa::builder(settings)
        .database_url(database_url)
        .models(models);
    if let Some(token) = tokens.0 {
        builder = builder.telegram_token(token);
    }
    if let Some(token) = tokens.1 {
        builder = builder.discord_token(token);
    }
    builder.build().await.expect("kaiwa")
}
