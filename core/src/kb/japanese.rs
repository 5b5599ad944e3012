//! Japanese morphological analysis for the knowledge base: the base forms of a text's
//! content words (詰まって → 詰まる, 割れて → 割れる, 間違えたら → 間違える), after full-width
//! and half-width forms are folded (NFKC: ｐａｓｓ → pass, ﾊﾟｽﾜｰﾄﾞ → パスワード). The
//! dictionary is MeCab's IPADIC, compiled from its source folder when the knowledge base
//! opens (Debian's `mecab-ipadic` installs it at [`DEBIAN_IPADIC`]; about a second) and
//! kept in a cache file that later starts map into memory instead of reading: the pages a
//! tokenizer touches are all it costs, and they are shared by every process on the machine.

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
    tokenizer: vibrato_rkyv::Tokenizer,
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
    /// by the source's path and modification times) and mapped from there: the next start
    /// maps it in microseconds, and only the pages that tokenizing touches become resident,
    /// shared with every other process that maps the same file. A cache that cannot be
    /// written is only logged, and the dictionary then lives in this process's heap.
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
        let file = cache_dir.join(format!("kaiwa-ipadic-vibrato-rkyv07-{key:016x}.dic"));
        if file.is_file() {
            match mapped(&file) {
                Ok(tokenizer) => return Ok(Morphology { tokenizer }),
                Err(e) => {
                    tracing::warn!(error = %e, cache = %file.display(), "the compiled Japanese dictionary is compiled again")
                }
            }
        }
        let dictionary = vibrato_rkyv::Dictionary::from_inner(compile(dir)?);
        if let Err(e) = std::fs::create_dir_all(cache_dir) {
            tracing::warn!(error = %e, cache = %cache_dir.display(), "no folder for the compiled Japanese dictionary");
        }
        let partial = file.with_extension(format!("{}.partial", std::process::id()));
        let written = std::fs::File::create(&partial)
            .map_err(|e| e.to_string())
            .and_then(|out| {
                let mut out = std::io::BufWriter::new(out);
                dictionary.write(&mut out).map_err(|e| e.to_string())?;
                std::io::Write::flush(&mut out).map_err(|e| e.to_string())
            })
            .and_then(|()| std::fs::rename(&partial, &file).map_err(|e| e.to_string()));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&partial);
            tracing::warn!(error = %e, cache = %file.display(), "the compiled Japanese dictionary was not cached");
            return Ok(Morphology {
                tokenizer: vibrato_rkyv::Tokenizer::new(dictionary),
            });
        }
        // The heap copy goes; the mapped file replaces it.
        drop(dictionary);
        match mapped(&file) {
            Ok(tokenizer) => Ok(Morphology { tokenizer }),
            Err(e) => {
                tracing::warn!(error = %e, cache = %file.display(), "the compiled Japanese dictionary cannot be mapped");
                Self::from_mecab_dir(dir)
            }
        }
    }

    /// Compiles the IPADIC source in `dir` (its `*.csv`, `matrix.def`, `char.def`,
    /// `unk.def`).
    pub fn from_mecab_dir(dir: &Path) -> Result<Morphology, KbError> {
        Ok(Morphology {
            tokenizer: vibrato_rkyv::Tokenizer::new(vibrato_rkyv::Dictionary::from_inner(compile(
                dir,
            )?)),
        })
    }
}

/// A tokenizer over the compiled dictionary in `file`, mapped into memory. The archive is
/// checked in full the first time a file is seen (vibrato-rkyv then leaves a proof of the
/// check, named by the file's size and times, in the user's cache folder); later loads
/// trust that proof and touch nothing.
fn mapped(file: &Path) -> Result<vibrato_rkyv::Tokenizer, KbError> {
    let dictionary = vibrato_rkyv::Dictionary::from_path(file, vibrato_rkyv::LoadMode::TrustCache)
        .map_err(|e| KbError::Dictionary(format!("{}: {e}", file.display())))?;
    Ok(vibrato_rkyv::Tokenizer::new(dictionary))
}

/// The dictionary compiled from the IPADIC source in `dir`.
fn compile(dir: &Path) -> Result<vibrato_rkyv::dictionary::DictionaryInner, KbError> {
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
    let dictionary = vibrato_rkyv::SystemDictionaryBuilder::from_readers(
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
