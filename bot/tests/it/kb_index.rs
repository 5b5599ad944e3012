//! `kaiwa kb index` against a slow embeddings server (a CPU one): passages go in bounded
//! batches, each within the embeddings' own timeout, a failed batch is tried again, and
//! the progress is shown.

use kaiwa_tests::fake_embeddings::FakeEmbeddings;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kb_index_embeds_a_hundred_passages_on_a_slow_server_with_a_short_chat_timeout() {
    let fake = FakeEmbeddings::start(&[&["fever", "ill"]])
        .await
        .expect("fake embeddings");
    // 1 s per 8 passages; the chat timeout is 5 s
    fake.slow(Duration::from_secs(1));
    let dir = tempfile::tempdir().expect("tempdir");
    let kb = dir.path().join("kb").join("en");
    std::fs::create_dir_all(&kb).expect("kb folder");
    for file in 0..20 {
        let mut page = format!("# Guide {file}\n\n");
        for section in 0..5 {
            page.push_str(&format!(
                "## Topic {section} zq{section}\n\nHow to handle case {file}-{section}: \
                 open panel {file}{section} and press reset {section}{file}.\n\n"
            ));
        }
        std::fs::write(kb.join(format!("guide-{file}.md")), page).expect("page");
    }
    let config = dir.path().join("kaiwa.toml");
    std::fs::write(
        &config,
        format!(
            "[flows]\nkb_dir = \"{}\"\n\n[llm]\nbase_url = \"{}\"\nmodel = \"chat\"\ntimeout_secs = 5\n\
             embeddings_model = \"e5\"\nembeddings_input_type = true\n",
            dir.path().join("kb").display(),
            fake.base_url()
        ),
    )
    .expect("config");
    let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
    // the third batch of passages fails (after the probe of the vectors' space and two
    // batches): tried again from there, not from the start, and not given up
    fake.fail_request(3);
    let run = crate::common::kaiwa_in(dir.path(), &config, &url, &["kb", "index"], "").await;
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("embeddings: e5 (passages embedded)"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    assert!(
        run.stdout.contains("100 passages indexed"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("embedding passages: 8 of 100")
            && run.stderr.contains("embedding passages: 100 of 100"),
        "progress shown: {}",
        run.stderr
    );
    assert!(run.stderr.contains("trying again in"), "{}", run.stderr);
    let requests = fake.requests();
    assert!(
        requests.iter().all(|(n, _)| *n <= 8),
        "bounded batches: {requests:?}"
    );
    let passages: usize = requests
        .iter()
        .filter(|(_, kind)| kind.as_deref() == Some("passage"))
        .map(|(n, _)| n)
        .sum();
    assert!(
        (100..=108).contains(&passages),
        "every passage, as a passage, the failed batch once more: {requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|(_, kind)| kind.as_deref() == Some("query")),
        "questions (the probe, the headings) as queries: {requests:?}"
    );
    // a second run finds them all kept: no passage is sent again
    let before = fake.requests().len();
    let again = crate::common::kaiwa_in(dir.path(), &config, &url, &["kb", "index"], "").await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(
        fake.requests()[before..]
            .iter()
            .all(|(_, kind)| kind.as_deref() != Some("passage")),
        "{:?}",
        &fake.requests()[before..]
    );
}

/// `kaiwa kb explain`: the ranking with each passage's scores and coverage, the floor's cut
/// and the passage it answers from, by words alone and with meaning (where a paraphrase
/// that shares no word with its passage is found by meaning alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kb_explain_shows_the_ranking_the_cut_and_the_floors_passage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kb = dir.path().join("kb").join("en");
    std::fs::create_dir_all(&kb).expect("kb folder");
    std::fs::write(
        kb.join("leave.md"),
        "# Leave\n\n## Sick leave\n\nWhen you are ill, tell your manager before 9:00 and rest; \
         a doctor's note is needed after three days.\n\n## Holidays\n\nBook holidays in the \
         planner two weeks ahead; your manager approves them.\n",
    )
    .expect("page");
    std::fs::write(
        kb.join("it.md"),
        "# IT\n\n## Password reset\n\nOpen the account page and choose Reset password; a \
         link arrives by email.\n",
    )
    .expect("page");
    let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
    let words = dir.path().join("words.toml");
    std::fs::write(
        &words,
        format!(
            "[flows]\nkb_dir = \"{}\"\n",
            dir.path().join("kb").display()
        ),
    )
    .expect("config");
    let run = crate::common::kaiwa_in(
        dir.path(),
        &words,
        &url,
        &["kb", "explain", "How do I reset my password?"],
        "",
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let out = &run.stdout;
    assert!(out.contains("ranked by words alone"), "{out}");
    assert!(out.contains("en/it.md#Password reset"), "{out}");
    assert!(
        out.contains("It answers from [1] en/it.md#Password reset: the passage meets 100 %"),
        "{out}"
    );
    // nothing shares a word: the floor finds nothing
    let run = crate::common::kaiwa_in(
        dir.path(),
        &words,
        &url,
        &["kb", "explain", "I have a fever today"],
        "",
    )
    .await;
    assert!(
        run.stdout
            .contains("The floor answers that it found nothing"),
        "{}",
        run.stdout
    );

    // with meaning: the paraphrase stands out in meaning and is answered from
    let fake = FakeEmbeddings::start(&[&["fever", "ill", "sick"]])
        .await
        .expect("fake embeddings");
    let with_meaning = dir.path().join("meaning.toml");
    std::fs::write(
        &with_meaning,
        format!(
            "[flows]\nkb_dir = \"{}\"\n\n[llm]\nbase_url = \"{}\"\nmodel = \"chat\"\nembeddings_model = \"e5\"\n",
            dir.path().join("kb").display(),
            fake.base_url()
        ),
    )
    .expect("config");
    let run = crate::common::kaiwa_in(
        dir.path(),
        &with_meaning,
        &url,
        &["kb", "explain", "I have a fever today"],
        "",
    )
    .await;
    let out = &run.stdout;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(out.contains("ranked by words and meaning (e5)"), "{out}");
    assert!(
        out.contains("meaning (similarity, above the mean)"),
        "{out}"
    );
    let sick = out
        .lines()
        .find(|l| l.ends_with("en/leave.md#Sick leave"))
        .unwrap_or_else(|| panic!("ranked: {out}"));
    assert!(sick.starts_with(" 1 "), "first: {out}");
    assert!(
        sick.contains(" 0.00 "),
        "by meaning alone (no BM25 score): {sick}"
    );
    assert!(
        out.contains("[1] en/leave.md#Sick leave"),
        "the floor's passage: {out}"
    );
}
