//! Collects every error of one attribute, then fails once (as serde_derive's `Ctxt` does).

use std::fmt::Display;

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;

/// The errors found while expanding one attribute.
#[derive(Default)]
pub(crate) struct Ctxt {
    errors: Vec<syn::Error>,
}

impl Ctxt {
    pub(crate) fn new() -> Self {
        Ctxt::default()
    }

    /// An error on the given tokens.
    pub(crate) fn error_spanned_by<T: ToTokens, M: Display>(&mut self, tokens: T, message: M) {
        self.errors.push(syn::Error::new_spanned(tokens, message));
    }

    /// An error at a span.
    pub(crate) fn error_at<M: Display>(&mut self, span: Span, message: M) {
        self.errors.push(syn::Error::new(span, message));
    }

    /// A syntax error from syn.
    pub(crate) fn syn_error(&mut self, error: syn::Error) {
        self.errors.push(error);
    }

    pub(crate) fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// `Ok` when nothing went wrong, else every error as one `compile_error!` sequence, in the
    /// order of the tokens they point at.
    pub(crate) fn check(mut self) -> Result<(), TokenStream> {
        self.errors.sort_by_key(|error| {
            let start = error.span().start();
            (start.line, start.column)
        });
        let mut errors = self.errors.into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for error in errors {
            combined.combine(error);
        }
        Err(combined.into_compile_error())
    }
}
