//! Japanese morphological analysis for the knowledge base: the base forms of a text's
//! content words (詰まって → 詰まる, 割れて → 割れる, 間違えたら → 間違える), after full-width
//! and half-width forms are folded (NFKC: ｐａｓｓ → pass, ﾊﾟｽﾜｰﾄﾞ → パスワード). The
//! dictionary is MeCab's IPADIC, compiled from its source folder when the knowledge base
//! opens (Debian's `mecab-ipadic` installs it at [`DEBIAN_IPADIC`]; about a second).

use super::KbError;
use std::path::Path;
use unicode_normalization::UnicodeNormalization;

/// Where Debian's `mecab-ipadic` package puts IPADIC's source.
pub const DEBIAN_IPADIC: &str = "/usr/share/mecab/dic/ipadic";

/// Verbs and nouns too common to say what a question is about.
const STOP_LEMMAS: &[&str] = &[
    "する",
    "ある",
    "いる",
    "なる",
    "できる",
    "れる",
    "られる",
    "せる",
    "させる",
    "くる",
    "いく",
    "おる",
    "しまう",
    "みる",
    "くれる",
    "もらう",
    "いただく",
    "ござる",
    "こと",
    "もの",
    "よう",
    "ため",
    "とき",
    "ところ",
    "方",
    "何",
    "どう",
    "どこ",
    "いつ",
    "これ",
    "それ",
    "ここ",
    "そこ",
];

/// A compiled IPADIC and its tokenizer.
pub struct Morphology {
    tokenizer: vibrato::Tokenizer,
}

impl std::fmt::Debug for Morphology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Morphology(IPADIC)")
    }
}

/// A file of the dictionary's source as text (IPADIC ships EUC-JP; a UTF-8 copy reads too).
fn read_text(path: &Path) -> Result<String, KbError> {
    let bytes = std::fs::read(path).map_err(|source| KbError::Io {
        path: path.display().to_string(),
        source,
    })?;
    match String::from_utf8(bytes) {
        Ok(text) => Ok(text),
        Err(e) => {
            let (text, _, bad) = encoding_rs::EUC_JP.decode(e.as_bytes());
            if bad {
                return Err(KbError::Dictionary(format!(
                    "{} is neither UTF-8 nor EUC-JP",
                    path.display()
                )));
            }
            Ok(text.into_owned())
        }
    }
}

impl Morphology {
    /// [`Self::from_mecab_dir`], the compiled dictionary kept in `cache_dir` (a file named
    /// by the source's path and modification times): the next start reads it (a tenth of
    /// the time and of the peak memory of compiling). A cache that cannot be written is
    /// only logged.
    pub fn cached(dir: &Path, cache_dir: &Path) -> Result<Morphology, KbError> {
        let key = {
            let mut stamp = dir.display().to_string();
            for name in ["matrix.def", "char.def", "unk.def", "Noun.csv", "Verb.csv"] {
                let modified = std::fs::metadata(dir.join(name))
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs());
                stamp.push_str(&format!("|{name}:{modified}"));
            }
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            std::hash::Hash::hash(&stamp, &mut hasher);
            std::hash::Hasher::finish(&hasher)
        };
        let file = cache_dir.join(format!("kaiwa-ipadic-vibrato05-{key:016x}.dic"));
        if let Ok(cached) = std::fs::File::open(&file)
            && let Ok(dictionary) = vibrato::Dictionary::read(std::io::BufReader::new(cached))
        {
            return Ok(Morphology {
                tokenizer: vibrato::Tokenizer::new(dictionary),
            });
        }
        let dictionary = compile(dir)?;
        if let Err(e) = std::fs::create_dir_all(cache_dir) {
            tracing::warn!(error = %e, cache = %cache_dir.display(), "no folder for the compiled Japanese dictionary");
        }
        let mut bytes = Vec::new();
        match dictionary.write(&mut bytes) {
            Ok(_) => {
                let partial = file.with_extension(format!("{}.partial", std::process::id()));
                let written = std::fs::write(&partial, &bytes)
                    .and_then(|()| std::fs::rename(&partial, &file));
                if let Err(e) = written {
                    let _ = std::fs::remove_file(&partial);
                    tracing::warn!(error = %e, cache = %file.display(), "the compiled Japanese dictionary was not cached");
                }
            }
            Err(e) => tracing::warn!(error = %e, "the compiled Japanese dictionary was not cached"),
        }
        Ok(Morphology {
            tokenizer: vibrato::Tokenizer::new(dictionary),
        })
    }

    /// Compiles the IPADIC source in `dir` (its `*.csv`, `matrix.def`, `char.def`,
    /// `unk.def`).
    pub fn from_mecab_dir(dir: &Path) -> Result<Morphology, KbError> {
        Ok(Morphology {
            tokenizer: vibrato::Tokenizer::new(compile(dir)?),
        })
    }
}

/// The dictionary compiled from the IPADIC source in `dir`.
fn compile(dir: &Path) -> Result<vibrato::Dictionary, KbError> {
    let io = |source| KbError::Io {
        path: dir.display().to_string(),
        source,
    };
    let mut csvs: Vec<_> = std::fs::read_dir(dir)
        .map_err(io)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    if csvs.is_empty() {
        return Err(KbError::Dictionary(format!(
            "no IPADIC *.csv in {}",
            dir.display()
        )));
    }
    csvs.sort();
    let mut lexicon = String::new();
    for csv in &csvs {
        lexicon.push_str(&read_text(csv)?);
        if !lexicon.ends_with('\n') {
            lexicon.push('\n');
        }
    }
    let [matrix, chars, unknown] =
        ["matrix.def", "char.def", "unk.def"].map(|name| read_text(&dir.join(name)));
    let dictionary = vibrato::SystemDictionaryBuilder::from_readers(
        lexicon.as_bytes(),
        matrix?.as_bytes(),
        chars?.as_bytes(),
        unknown?.as_bytes(),
    )
    .map_err(|e| KbError::Dictionary(format!("{}: {e}", dir.display())))?;
    Ok(dictionary)
}

impl Morphology {
    /// The base forms of `text`'s content words (nouns, verbs, adjectives, adverbs; not
    /// particles, auxiliaries, symbols, numbers or the commonest verbs), in order, each
    /// once; Latin words lowercased.
    pub fn lemmas(&self, text: &str) -> Vec<String> {
        let folded: String = text.nfkc().collect();
        let mut worker = self.tokenizer.new_worker();
        worker.reset_sentence(&folded);
        worker.tokenize();
        let mut out: Vec<String> = Vec::new();
        for i in 0..worker.num_tokens() {
            let token = worker.token(i);
            let mut feature = token.feature().split(',');
            let (pos, detail) = (feature.next().unwrap_or(""), feature.next().unwrap_or(""));
            let content = match pos {
                "名詞" => !matches!(detail, "非自立" | "代名詞" | "数" | "接尾" | "特殊"),
                "動詞" | "形容詞" => detail != "非自立" && detail != "接尾",
                "副詞" => true,
                _ => false,
            };
            if !content {
                continue;
            }
            let base = feature.nth(4).filter(|b| !b.is_empty() && *b != "*");
            let lemma = base.unwrap_or(token.surface()).to_lowercase();
            let one_kana = lemma.chars().count() == 1
                && lemma
                    .chars()
                    .all(|c| ('\u{3040}'..='\u{30ff}').contains(&c));
            if lemma.trim().is_empty()
                || one_kana
                || STOP_LEMMAS.contains(&lemma.as_str())
                || out.contains(&lemma)
            {
                continue;
            }
            out.push(lemma);
        }
        out
    }
}
