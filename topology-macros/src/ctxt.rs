//! Collects every error of one attribute, then fails once (as serde_derive's `Ctxt` does).

use std::fmt::Display;

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;

/// The errors found while expanding one attribute. [`Ctxt::check`] must be called before it is
/// dropped: in debug builds, dropping it unchecked panics, since its errors would be lost.
pub(crate) struct Ctxt {
    /// `None` once checked.
    errors: Option<Vec<syn::Error>>,
}

impl Ctxt {
    pub(crate) fn new() -> Self {
        Ctxt {
            errors: Some(Vec::new()),
        }
    }

    /// An error on the given tokens.
    pub(crate) fn error_spanned_by<T: ToTokens, M: Display>(&mut self, tokens: T, message: M) {
        self.syn_error(syn::Error::new_spanned(tokens, message));
    }

    /// An error at a span.
    pub(crate) fn error_at<M: Display>(&mut self, span: Span, message: M) {
        self.syn_error(syn::Error::new(span, message));
    }

    /// A syntax error from syn.
    pub(crate) fn syn_error(&mut self, error: syn::Error) {
        self.errors
            .as_mut()
            .expect("errors recorded after check()")
            .push(error);
    }

    /// `Ok` when nothing went wrong, else every error as one `compile_error!` sequence, in the
    /// order of the tokens they point at.
    pub(crate) fn check(mut self) -> Result<(), TokenStream> {
        let mut errors = self.errors.take().expect("check() is called once");
        errors.sort_by_key(|error| {
            let start = error.span().start();
            (start.line, start.column)
        });
        let mut errors = errors.into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for error in errors {
            combined.combine(error);
        }
        Err(combined.into_compile_error())
    }
}

impl Drop for Ctxt {
    fn drop(&mut self) {
        if cfg!(debug_assertions) && self.errors.is_some() && !std::thread::panicking() {
            panic!("a `Ctxt` was dropped without `check()`: its errors would be lost");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_contexts_drop_quietly() {
        assert!(Ctxt::new().check().is_ok());
        let mut cx = Ctxt::new();
        cx.error_at(Span::call_site(), "wrong");
        assert!(cx.check().is_err());
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic = "dropped without `check()`"]
    fn unchecked_contexts_panic() {
        let mut cx = Ctxt::new();
        cx.error_at(Span::call_site(), "lost");
    }
}
