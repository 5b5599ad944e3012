//! The reading club: members, books, a book's insights.

use super::{failed, page, t, when};
use crate::web_console::ConsoleState;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::{DateTime, Utc};
use kaiwa_core::store::reading::ReadingStatus;
use maud::html;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize, Default)]
pub(in crate::web_console) struct BookQuery {
    book: Option<String>,
}

pub(in crate::web_console) async fn reading(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Query(query): Query<BookQuery>,
) -> Response {
    let signed = signed!(state, headers);
    let lang = signed.lang;
    let records = match state.store.all_reading_records(5_000).await {
        Ok(r) => r,
        Err(e) => return failed(lang, e),
    };
    struct Member {
        name: String,
        books: usize,
        reading: Vec<String>,
        last: DateTime<Utc>,
    }
    let mut members: BTreeMap<(String, String), Member> = BTreeMap::new();
    struct Book {
        title: String,
        author: Option<String>,
        readers: usize,
        finished: usize,
    }
    let mut books: BTreeMap<String, Book> = BTreeMap::new();
    for r in &records {
        let m = members
            .entry((r.platform.clone(), r.user_id.clone()))
            .or_insert_with(|| Member {
                name: r.user_name.clone(),
                books: 0,
                reading: Vec::new(),
                last: r.updated_at,
            });
        m.books += 1;
        m.last = m.last.max(r.updated_at);
        if r.record.status == ReadingStatus::Reading {
            m.reading.push(r.record.title.clone());
        }
        let b = books
            .entry(r.record.title.to_lowercase())
            .or_insert_with(|| Book {
                title: r.record.title.clone(),
                author: r.record.author.clone(),
                readers: 0,
                finished: 0,
            });
        b.readers += 1;
        if r.record.status == ReadingStatus::Completed {
            b.finished += 1;
        }
    }
    let chosen = query
        .book
        .as_deref()
        .map(str::to_lowercase)
        .filter(|b| !b.is_empty());
    let mut insights = Vec::new();
    if let Some(book) = &chosen {
        for r in records
            .iter()
            .filter(|r| r.record.title.to_lowercase() == *book)
        {
            match state.store.insights(r.record.id).await {
                Ok(list) => insights.extend(list.into_iter().map(|i| (r.user_name.clone(), i))),
                Err(e) => return failed(lang, e),
            }
        }
        insights.sort_by_key(|(_, i)| i.at);
    }
    let mut by_readers: Vec<&Book> = books.values().collect();
    by_readers.sort_by_key(|b| std::cmp::Reverse(b.readers));
    let body = html! {
        @if let Some(book) = &chosen {
            section #insights {
                h2 { (t(lang, "Insights on ", "インサイト: ")) (books.get(book).map_or(book.as_str(), |b| b.title.as_str())) }
                @if insights.is_empty() { p.hint { (t(lang, "No insights yet.", "まだインサイトはありません。")) } }
                ul { @for (who, i) in &insights {
                    li { span.meta { (who) " · " (i.kind.as_str()) " · " (when(i.at)) } div.text { (i.text) } }
                } }
            }
        }
        section #members {
            h2 { (t(lang, "Members", "メンバー")) " (" (members.len()) ")" }
            table { thead { tr { th { (t(lang, "Member", "メンバー")) } th { (t(lang, "Books", "冊数")) } th { (t(lang, "Reading now", "読書中")) } th { (t(lang, "Last active", "最終更新")) } } }
                tbody { @for ((platform, user), m) in &members {
                    tr {
                        td { a href={ "/sessions?user=" (user) } { (m.name) } " " span.meta { (platform) } }
                        td { (m.books) }
                        td { (m.reading.join(", ")) }
                        td { (when(m.last)) }
                    }
                } } }
        }
        section #books {
            h2 { (t(lang, "Books", "本")) " (" (books.len()) ")" }
            table { thead { tr { th { (t(lang, "Title", "タイトル")) } th { (t(lang, "Author", "著者")) } th { (t(lang, "Readers", "読者")) } th { (t(lang, "Finished", "読了")) } } }
                tbody { @for b in &by_readers {
                    tr {
                        td { a href=(format!("/reading?{}", serde_urlencoded::to_string([("book", b.title.as_str())]).unwrap_or_default())) { (b.title) } }
                        td { (b.author.as_deref().unwrap_or("-")) }
                        td { (b.readers) }
                        td { (b.finished) }
                    }
                } } }
        }
    };
    page(&signed, "/reading", t(lang, "Reading club", "読書会"), body)
}
