//! The flows Kaiwa runs, one folder per seed family. [`builtin`] builds them from the
//! [`FlowConfig`] the binary loads (forms, knowledge base).

pub mod assistant;
pub mod helpdesk;
pub mod interview;
pub mod reading;

use crate::flow::Flow;
use crate::kb::KnowledgeBase;
use interview::form::Form;
use std::sync::Arc;

/// What the built-in flows are configured with (loaded by the binary).
#[derive(Clone, Default)]
pub struct FlowConfig {
    pub forms: Vec<Form>,
    pub default_form: Option<String>,
    /// The help-desk's knowledge base; without one the help-desk flow is not offered.
    pub kb: Option<Arc<KnowledgeBase>>,
    /// The help-desk's search by meaning (`[llm] embeddings_model`).
    pub meaning: Option<Arc<crate::kb::Semantic>>,
    /// The book catalogue; with it the reading flow is offered.
    pub catalogue: Option<Arc<reading::catalogue::Catalogue>>,
    /// The web search (`[search]`): the BookGuide's `web_search`, and the help-desk's too
    /// when `web_for_helpdesk`.
    pub web: Option<Arc<crate::search::WebSearch>>,
    pub web_for_helpdesk: bool,
    /// The books API (`[books_api]`): `/reading start` of a book the catalogue lacks, and
    /// the recommendations.
    pub books_api: Option<Arc<crate::search::BooksApi>>,
}

/// Every built-in flow, the default first.
pub fn builtin(config: &FlowConfig) -> Vec<Arc<dyn Flow>> {
    let mut flows: Vec<Arc<dyn Flow>> = vec![
        Arc::new(assistant::AssistantFlow::new(
            !config.forms.is_empty(),
            config.kb.clone(),
            config.catalogue.clone(),
        )),
        Arc::new(interview::InterviewFlow::new(
            config.forms.clone(),
            config.default_form.clone(),
        )),
    ];
    if let Some(kb) = &config.kb {
        let mut helpdesk = helpdesk::HelpdeskFlow::new(crate::kb::KbSearch {
            kb: kb.clone(),
            meaning: config.meaning.clone(),
        });
        if let (Some(web), true) = (&config.web, config.web_for_helpdesk) {
            helpdesk = helpdesk.with_web(web.clone());
        }
        if !config.forms.is_empty() {
            helpdesk = helpdesk.with_interviews();
        }
        flows.push(Arc::new(helpdesk));
    }
    if let Some(catalogue) = &config.catalogue {
        let mut guide = reading::book_guide::BookGuide::new(catalogue.clone(), config.kb.clone());
        if let Some(web) = &config.web {
            guide = guide.with_web(web.clone());
        }
        let guide = Arc::new(guide);
        let onboarding = reading::onboarding::OnboardingFlow::new().with_guide(guide.clone());
        let mut reading = reading::ReadingFlow::new(catalogue.clone(), guide);
        let mut recommend = reading::recommendation::RecommendFlow::new(catalogue.clone());
        if let Some(api) = &config.books_api {
            reading = reading.with_books(api.clone());
            recommend = recommend.with_books(api.clone());
        }
        flows.push(Arc::new(reading));
        flows.push(Arc::new(onboarding));
        flows.push(Arc::new(
            reading::mentor::MentorFlow::new().with_catalogue(catalogue.clone()),
        ));
        flows.push(Arc::new(recommend));
    }
    flows
}
