//! The Greeter's step (seed 000): language, country and time zone before the first
//! question, from the model's `greeter` agent or its rule-based floor, and the greeting
//! text itself (screened like every text sent to an applicant).

use super::form::Form;
use super::greeter_tools::Section;
use super::state::InterviewState;
use super::{InterviewFlow, greeter_tools, lang_of, quick_check};
use crate::flow::{FlowError, TurnContext, TurnOutput};
use crate::i18n::pick;
use crate::message::OptionItem;
use crate::store::StateChange;
use std::sync::Arc;

impl InterviewFlow {
    pub(super) fn greeting_step(&self, st: &mut InterviewState, out: &mut TurnOutput) -> bool {
        let lang = lang_of(st);
        match greeter_tools::section(st) {
            Section::Language => {
                out.options(
                    "Which language would you like to use? / ご希望の言語を選んでください。",
                    vec![
                        OptionItem::new("en", "English"),
                        OptionItem::new("ja", "日本語"),
                    ],
                    false,
                );
                false
            }
            Section::Country => {
                // (not again right after the suggestions for a country we did not know)
                if !out
                    .outgoing
                    .iter()
                    .any(|o| matches!(o, crate::message::Outgoing::Options(_)))
                {
                    out.say(pick(
                        &lang,
                        "Which country do you live in?",
                        "お住まいの国を教えてください。",
                    ));
                }
                false
            }
            Section::Timezone => {
                let zones = greeter_tools::zones_of(st.country.as_deref().unwrap_or_default());
                if zones.len() > 1 {
                    st.zone_choices = zones.iter().map(|z| z.to_string()).collect();
                    out.options(
                        pick(
                            &lang,
                            "Which time zone are you in?",
                            "どのタイムゾーンにお住まいですか？",
                        ),
                        zones
                            .iter()
                            .map(|z| OptionItem::new(*z, z.replace('_', " ")))
                            .collect(),
                        false,
                    );
                    false
                } else if let Some(zone) = zones.first() {
                    self.set_timezone(st, out, zone);
                    true
                } else if !st.zone_asked {
                    // a country whose zones we do not know: asked, never assumed
                    st.zone_asked = true;
                    out.say(greeter_tools::zone_question_in_words(&lang));
                    false
                } else {
                    // asked and not answered with a zone: none is assumed
                    st.timezone_unresolved.get_or_insert_with(String::new);
                    true
                }
            }
            Section::Completed => true,
        }
    }

    pub(super) fn set_language(&self, st: &mut InterviewState, out: &mut TurnOutput, lang: &str) {
        st.language = Some(lang.to_string());
        out.change(StateChange::SetLanguage {
            language: lang.to_string(),
        });
    }

    pub(super) fn set_country(&self, st: &mut InterviewState, out: &mut TurnOutput, country: &str) {
        st.country = Some(country.to_string());
        out.change(StateChange::SetCountry {
            country: country.to_string(),
        });
    }

    pub(super) fn set_timezone(&self, st: &mut InterviewState, out: &mut TurnOutput, zone: &str) {
        st.timezone = Some(zone.to_string());
        st.zone_choices.clear();
        out.change(StateChange::SetTimezone {
            timezone: zone.to_string(),
        });
    }

    /// Applies what the Greeter agent set, emitting the seed's state changes.
    pub(super) fn apply_greeter(
        &self,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        updated: &InterviewState,
    ) {
        if updated.language != st.language
            && let Some(l) = &updated.language
        {
            self.set_language(st, out, l);
        }
        if updated.country != st.country
            && let Some(c) = &updated.country
        {
            self.set_country(st, out, c);
        }
        if updated.timezone != st.timezone
            && let Some(z) = &updated.timezone
        {
            self.set_timezone(st, out, z);
        }
    }

    pub(super) async fn greeting_text(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        text: &str,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        let section = greeter_tools::section(st);
        if matches!(section, Section::Country | Section::Timezone)
            && super::applicant_question::asks(text)
            && !self.code_knows(st, section, text)
        {
            // "Why do you need my country?" is no country
            self.applicant_asked_greeter(ctx, form, st, out, text);
            return Ok(());
        }
        if section == Section::Language {
            if let Some(lang) = greeter_tools::detect_language(text) {
                self.set_language(st, out, lang);
            }
        } else if self.code_knows(st, section, text) {
            // a country or zone the code reads itself: no model call to wait for
            self.greeting_floor(st, out, section, text);
        } else if let Some(model) = ctx.models.for_agent(greeter_tools::AGENT) {
            match greeter_tools::run_model(
                model.as_ref(),
                st.clone(),
                form.title.get(&lang_of(st)),
                text,
                ctx.ledger,
            )
            .await
            {
                Ok(result) => {
                    self.apply_greeter(st, out, &result.state.state);
                    if let Some(question) = result
                        .state
                        .asked
                        .filter(|_| greeter_tools::section(st) != Section::Completed)
                        && quick_check::screen(form, &question).is_empty()
                    {
                        out.say(question);
                        return Ok(());
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the Greeter failed; using rules"),
            }
            if greeter_tools::section(st) == section {
                self.greeting_floor(st, out, section, text);
            }
        } else {
            self.greeting_floor(st, out, section, text);
        }
        self.advance(ctx, form, st, out).await
    }

    /// Whether `text` answers the greeting's `section` in a way the code reads without a
    /// model: a country it knows by name or code, a time zone among the country's or by
    /// its IANA name.
    fn code_knows(&self, st: &InterviewState, section: Section, text: &str) -> bool {
        match section {
            Section::Country => greeter_tools::country_named(text).is_some(),
            Section::Timezone => {
                let wanted = text.trim().to_lowercase().replace(' ', "_");
                !wanted.is_empty()
                    && (st.zone_choices.iter().any(|z| {
                        z.to_lowercase() == wanted
                            || z.to_lowercase().ends_with(&format!("/{wanted}"))
                    }) || greeter_tools::is_valid_zone(text.trim()))
            }
            Section::Language | Section::Completed => false,
        }
    }

    pub(super) fn greeting_floor(
        &self,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        section: Section,
        text: &str,
    ) {
        match section {
            Section::Country => match greeter_tools::resolve_country(text) {
                Some(code) => self.set_country(st, out, code),
                // "I live in Tokyo": the city says the country and its zone
                None if let Some((code, zone)) = greeter_tools::city_named(text) => {
                    self.set_country(st, out, code);
                    self.set_timezone(st, out, zone);
                }
                None if !st.country_asked_again || !greeter_tools::could_be_a_place(text) => {
                    // not stored as typed: asked again, with suggestions (again and again
                    // for what is no place: an address, a number)
                    st.country_asked_again = true;
                    let lang = lang_of(st);
                    out.options(
                        pick(
                            &lang,
                            &format!(
                                "I don't know the country «{}». Which country do you live in? Pick one, or type its name again.",
                                text.trim()
                            ),
                            &format!(
                                "「{}」という国が見つかりませんでした。お住まいの国を選ぶか、もう一度国名を入力してください。",
                                text.trim()
                            ),
                        ),
                        greeter_tools::SUGGESTED_COUNTRIES
                            .iter()
                            .map(|code| OptionItem::new(*code, greeter_tools::country_name(code, &lang)))
                            .collect(),
                        false,
                    );
                }
                // a second try we do not know either: kept as written, unresolved (never
                // the answer; the admins are told), and its zone is asked in words
                None => st.country_unresolved = Some(text.trim().to_string()),
            },
            Section::Timezone => {
                let wanted = text.trim().to_lowercase().replace(' ', "_");
                let found = st
                    .zone_choices
                    .iter()
                    .find(|z| {
                        z.to_lowercase() == wanted
                            || z.to_lowercase().ends_with(&format!("/{wanted}"))
                    })
                    .cloned()
                    .or_else(|| {
                        greeter_tools::is_valid_zone(text.trim()).then(|| text.trim().to_string())
                    });
                if let Some(zone) = found {
                    self.set_timezone(st, out, &zone);
                } else if st.zone_asked && st.zone_choices.is_empty() {
                    // asked in words and not understood: kept as written, no zone assumed
                    st.timezone_unresolved = Some(text.trim().to_string());
                }
            }
            Section::Language | Section::Completed => {}
        }
    }
}
