//! The list-shaped values of a key: string lists (`["a", "b"]`) and `("key", "value")` pairs.

use syn::{Expr, ExprLit, Lit};

use super::{Key, Pairs, StrList, ungroup};
use crate::ctxt::Ctxt;

impl Key<'_> {
    /// An array of string literals (`["a", "b"]`).
    pub(crate) fn strings(&self, cx: &mut Ctxt) -> Option<StrList> {
        let expr = self.expr(cx)?;
        match expr {
            Expr::Array(array) => {
                let mut out = Vec::new();
                let mut complete = true;
                for elem in &array.elems {
                    match ungroup(elem) {
                        Expr::Lit(ExprLit {
                            lit: Lit::Str(s), ..
                        }) => out.push(s.clone()),
                        other => {
                            complete = false;
                            cx.error_spanned_by(
                                other,
                                self.msg(format!(
                                    "expected a string literal in the list, as in `{}`",
                                    self.example
                                )),
                            );
                        }
                    }
                }
                Some(StrList {
                    lits: out,
                    brackets: array.bracket_token.span.join(),
                    complete,
                })
            }
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => {
                cx.error_spanned_by(
                    expr,
                    self.msg(format!(
                        "expected a list of strings; write `{} = [{:?}]`",
                        self.key,
                        s.value()
                    )),
                );
                None
            }
            _ => {
                cx.error_spanned_by(
                    expr,
                    self.msg(format!(
                        "expected a list of string literals, as in `{}`",
                        self.example
                    )),
                );
                None
            }
        }
    }

    /// A list of `("key", "value")` pairs of string literals.
    pub(crate) fn pairs(&self, cx: &mut Ctxt) -> Option<Pairs> {
        let expr = self.expr(cx)?;
        let Expr::Array(array) = expr else {
            cx.error_spanned_by(
                expr,
                self.msg(format!(
                    "expected a list of `(\"key\", \"value\")` pairs, as in `{}`",
                    self.example
                )),
            );
            return None;
        };
        let lit = |e: &Expr| match ungroup(e) {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => Some(s.clone()),
            _ => None,
        };
        let mut pairs = Vec::new();
        for elem in &array.elems {
            let pair = match ungroup(elem) {
                Expr::Tuple(t) if t.elems.len() == 2 => lit(&t.elems[0]).zip(lit(&t.elems[1])),
                _ => None,
            };
            match pair {
                Some(pair) => pairs.push(pair),
                None => cx.error_spanned_by(
                    elem,
                    self.msg(format!(
                        "expected a `(\"key\", \"value\")` pair of string literals, as in `{}`",
                        self.example
                    )),
                ),
            }
        }
        Some(Pairs { pairs })
    }
}
