"""What each dashboard view shows, one paragraph per view, keyed by its name in the registry (ui/registry.py).

Data only, read by scripts/gen_docs.py, which writes docs/views.md from REGISTRY and this; tests/test_docs.py checks
that every registered view has its paragraph and that the committed page is the generated one."""

from __future__ import annotations

ABOUT: dict[str, str] = {
    "Lesson": (
        "the first tab: the seven steps of the source articles (X → per-head Q, K, V → QKᵀ → ÷√d_k → mask → softmax"
        " → ·V, concat, ·Wᴼ) on your sentence, model and layer, one short paragraph per step with that step's real "
        "matrix and shape and the tab that goes deeper; it ends with the articles' two claims drawn live as "
        "matrices side by side with their difference: looping over heads equals the one-big-matrix form, and h = 1 "
        "with Wᴼ = I is plain self-attention"
    ),
    "Step by step": (
        "every intermediate of one head with its shape: X → Q, K, V (for rotary models before and after rotation; "
        "soft-capping and position bias as their own steps) → QKᵀ → ×1/√d_k → mask → softmax → ·V → concat → ·Wᴼ; "
        'the seed 000 worked example (own weights, d_model 512, 8 heads, "humpty dumpty sat on") is one click away'
    ),
    "Masks": (
        "the padding mask on a real padded batch (your text and a shorter one): padded keys get exactly zero "
        "weight, padded query rows are shaded, and the real block equals the shorter sentence run alone (difference"
        " shown); the causal mask on an encoder as a what-if beside it"
    ),
    "Heads": (
        'one heatmap per head (shared colour scale, query on y, key on x, hover "query → key: weight"); click a '
        'cell to open its head large; a focus token (default "it") and where it attends in every head. With no '
        'layer or head in the link, the app opens on the head where "it"\'s weight on "animal" stands out most from '
        "the other tokens' (MiniLM: layer 3, head 1: 0.64 against 0.09 on average) and says so, naming the head "
        'with the largest weight where almost every token looks at "animal" (layer 5, head 11)'
    ),
    "Lines": (
        "the bertviz-style picture: queries left, keys right, one line per weight (opacity = weight, one colour per"
        " head, weights under 0.01 not drawn, at most 10,000 lines, a window of 80 tokens on long texts); click a "
        "query token to draw only its lines"
    ),
    "Overview": (
        "all layers × heads in one figure (one heatmap, tiles averaged down beyond 48 tokens); click a tile to open"
        " it in Heads"
    ),
    "Compare heads": (
        "any two heads of any layers side by side and their difference; Jensen–Shannon distances between all heads "
        "of the layer, ordered so similar heads sit together; per-head entropy and attention to self"
    ),
    "Where does it look?": (
        "pick a query and a key token (it → animal) and rank all layers × heads by that weight; click a cell of the"
        " map (or one of the ten top heads) to see that head right there, *Open in Heads* jumps to the Heads tab"
    ),
    "Two sentences": (
        '"...too tired" vs "...too wide" (swap them with a button, or replace any word): heads ranked by how much '
        "of the focus token's weight moves from one chosen referent to another (animal → street), over the tokens "
        "both sentences share: what the second referent gained, at most what the first lost (`analysis.moves`), "
        'with a bar per destination (referent 1, referent 2, the sinks, the rest) and a plain "no head really '
        'switches" when none does (MiniLM: layer 3, head 1 moves 0.08; most of what "animal" loses goes to [CLS]); '
        "a text without the seed's words opens on its own pronoun and the two words it attends to most near it, and"
        " says why (`analysis.referent_pick`); click the map or *Open* a ranked head for its bars and heatmaps; for"
        " a decoder it says why tokens before the change cannot differ and compares the last token instead"
    ),
    "Head roles": (
        "every layer × head scored as in Clark et al. 2019 / Voita et al. 2019 / Olsson et al. 2022 (first-token "
        "sink, previous/next token, self, duplicate token, induction, special-token sink, punctuation, spread) with"
        " a label from stated thresholds, taken after the first-token sink's share is removed (the view's “Rules” "
        "state which queries and keys each score counts, enough to recompute every number: "
        "`analysis.roles.ROLE_RULES`); a layer × head map coloured by label (click opens the head) and the table; "
        "the labels also title the Heads grid"
    ),
    "Corpus": (
        "Head roles over many texts (issue 26 §2): the bundled example sentences (159, the default), an uploaded "
        ".txt (one text per line, within the upload limit; at most 2,000 texts, 64 in hosted mode) or a stats file "
        "written by `mha-viz corpus`; layer × head maps of a chosen score's mean over the texts, its spread (std "
        "across texts) and label stability (share of texts with the head's most frequent label, the label in the "
        "hover); a click opens the head in Heads on its most typical text (the one whose score is closest to the "
        "head's mean). Beside them, Clark et al. 2019's Figure 2 for the chosen model: mean attention to [CLS], "
        "[SEP] (the first and last special tokens; a model without them, like SmolLM2, has its first token stand in"
        " for [CLS] and no [SEP] line) and punctuation by layer, with the paper's BERT-base findings quoted. Up to "
        "16 × 72 text-heads score by themselves; more on a button, with a progress bar and Cancel"
    ),
    "Induction": (
        "decoders: random tokens repeated twice; every head's induction score (weight from each second-copy token "
        "to the token after its first occurrence, Olsson et al. 2022) as a layer × head map, the top heads, and the"
        " per-token loss on the first copy against the second (in-context learning)"
    ),
    "Circuits": (
        "one head's QK circuit W_Q·W_Kᵀ (where to look) and OV circuit W_V·W_O (what is moved), computed through "
        "the d_head × d_head factors: singular values, the OV copying score Re(Σλ)/Σ|λ|, what each token of the "
        "text writes through the OV circuit (read by the LM head, or against the embeddings for encoders) and the "
        "query → key pairs the QK circuit favours; a layer × head map of copying scores (Elhage et al. 2021). "
        "Rotary models: the QK circuit before rotation, said so"
    ),
    "Next token": (
        "causal LMs: the top-5 next tokens, the logit lens (each layer's residual stream read by the model's own "
        "final norm and LM head, for the last positions) and each head's direct logit attribution to the predicted "
        "token (layer × head map, a click opens the head)"
    ),
    "Why?": (
        "why does this head look there? One head's score from a query token to a key, against a second key, split "
        "exactly into query-source × key-source terms (the embeddings, each earlier head, each MLP; every norm's "
        "scale frozen at the value the model computed): the score and both weights, the largest terms as a heatmap "
        "(sources grouped, or each one), each side's totals as bars, and one sentence naming the top pair; it opens "
        "on the opened head, the focus token, its top key and its second key (`mha-viz why` writes the same split)"
    ),
    "Rollout": (
        "attention rollout across layers (Abnar & Zuidema 2020, with the residual identity), definition in the view"
    ),
    "Head count": (
        "the same projections re-split into every valid head count (divisors of d_model, up to 64 heads shown), "
        "with mean entropy, mean largest weight and output change across counts — a what-if for pretrained weights"
    ),
    "W^O": (
        "identity / random orthogonal / ablated / scaled Wᴼ against the learned one: output change per token "
        "(relative norm, cosine) and each head's contribution after Wᴼ; Wᴼ itself as a heatmap with one block per "
        "head; the live check that 1 head with Wᴼ = I is plain single-head self-attention, as a picture. For own "
        'weights it says that the "learned" Wᴼ is a random initialisation'
    ),
    "Ablation": (
        "zero chosen heads in chosen layers of the whole model (hooks for one run; the shared weights are "
        "untouched): sentence-embedding cosine and per-token hidden-state change for encoders, next-token top-5 "
        "before/after for causal LMs"
    ),
    "Head importance": (
        "every head of the model removed in turn (its slice zeroed on the way into Wᴼ): 1 − cosine of the sentence "
        "embedding for encoders, the increase of the mean next-token loss for decoders, as a layer × head map "
        "(click opens the head); the pruning curve, heads removed least important first (smallest |importance|, "
        "fixed order) against 3 random orders, with the heads that survive longest; on your text or with the "
        "example sentences. MiniLM's 72 heads scan in about 0.5 s by themselves (on texts up to 96 tokens); bigger "
        "models and longer texts scan on a button, with a progress bar and Cancel (Michel et al. 2019)"
    ),
    "Patching": (
        "activation patching per head (Wang et al. 2022): the corrupted text run with one head's clean output (its "
        "slice of Wᴼ's input), query, key or value put back (k, v per K/V head on grouped-query models, saying "
        "which query heads read it); the metric stated (decoders: logit(answer) − logit(wrong) at the last "
        'position, by default the IOI pair and " Mary"/" John"; encoders: cos(h_it, h_animal) − cos(h_it, h_street)'
        " at the last layer, the Two sentences pair), recovered = (patched − corrupted)/(clean − corrupted) as a "
        "diverging layer × head map (click opens the head), the clean, corrupted and patched numbers, the top heads"
        " with their role labels, one head patched position by position, and path patching from a sender head to "
        "the q, k or v of every later head. Several patched runs go through one forward pass; attribution patching "
        "(one forward and one backward pass) is shown beside it with their correlation; up to 100 runs start by "
        "themselves, above that the attribution estimate is drawn first and exact patching runs on a button with a "
        "progress bar and Cancel"
    ),
    "Variants": (
        "share keys and values (MHA → GQA → MQA, Ainslie et al. 2023) on the model without training: every g that "
        "divides the K/V head count, each group's K and V the mean of its members' (consecutive heads, or aligned: "
        "heads with the most similar keys and values on the text grouped first); the chosen layer's heads before "
        "and after with their Jensen–Shannon distance, and for the whole model the output change (Head importance's"
        " measure) against the KV cache = 2 · layers · g · d_head · tokens · 4 bytes, on the text or at 32,768 "
        "tokens, one curve per grouping, the model's own point marked; collaborative heads (Cordonnier et al. "
        "2020): the singular values of each layer's concatenated W_Q and W_K, the dimensions keeping 90/95/99 % of "
        "the energy against one head's, and (plain layers) the output change with the chosen layer's queries and "
        "keys on a shared rank-r basis"
    ),
    "KV cache": (
        "causal LMs: which keys a compressed KV cache keeps per K/V head, and what that changes. A text's first "
        "tokens are the cached prefix, the rest is read with only the kept keys among them; pick a policy "
        "(StreamingLLM, H2O, SnapKV, TOVA, Ada-KV, DuoAttention-style) and a budget per K/V head (5–100 % of the "
        "prefix): the kept keys per layer and K/V head, the attention mass each query head loses, the change of "
        "the loss on the continuation, the next token's KL, the top-5 next tokens before → after and the cache's "
        "size; on a toggle, loss against cache size for every policy and budget (one pass each), and which K/V "
        "heads' evictions cause the change (each restored alone)"
    ),
}
