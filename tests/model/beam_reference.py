"""Independent beam search for ctune's tests, written in PyTorch from Hugging Face's definitions
(transformers `generation/beam_search.py` BeamSearchScorer / BeamHypotheses and `generation/utils.py`
`_beam_search`, as summarised in docs/formats.md "Beam search"). It recomputes the full sequence
for every beam at every step (no cache, no batching, no padding) and shares no code with ctune.

beam_search(logprobs, prompt, ...) -> {"ids": generated ids without the eos token,
                                       "eos": whether the chosen hypothesis ended with eos,
                                       "score": its length-penalised score}
where logprobs(seq) gives the float64 log-softmax of the next-token logits after `seq`.
"""
import torch


def repetition_penalty(scores, seq, theta):
    """CTRL: every distinct token seen: score * theta when negative, score / theta otherwise."""
    for t in set(seq):
        scores[t] = scores[t] * theta if scores[t] < 0 else scores[t] / theta
    return scores


def ban_repeated_ngrams(scores, seq, n):
    """Tokens that would complete an n-gram already present in seq get -inf."""
    if n <= 0 or len(seq) + 1 < n:
        return scores
    followers = {}
    for i in range(len(seq) - n + 1):
        followers.setdefault(tuple(seq[i:i + n - 1]), []).append(seq[i + n - 1])
    for t in followers.get(tuple(seq[len(seq) - n + 1:]), []):
        scores[t] = float("-inf")
    return scores


class Hypotheses:
    """The num_beams best finished hypotheses and the worst score among them."""

    def __init__(self, num_beams, length_penalty, early_stopping, max_length, prompt_len):
        self.num_beams, self.length_penalty = num_beams, length_penalty
        self.early_stopping, self.max_length, self.prompt_len = early_stopping, max_length, prompt_len
        self.beams = []  # (score, generated ids, ended with eos)
        self.worst = 1e9

    def add(self, ids, sum_logprobs, generated_len, eos):
        score = sum_logprobs / (generated_len ** self.length_penalty)
        if len(self.beams) < self.num_beams or score > self.worst:
            self.beams.append((score, ids, eos))
            if len(self.beams) > self.num_beams:
                ranked = sorted((s, i) for i, (s, _, _) in enumerate(self.beams))
                del self.beams[ranked[0][1]]
                self.worst = ranked[1][0]
            else:
                self.worst = min(score, self.worst)

    def is_done(self, best_sum_logprobs, cur_len):
        if len(self.beams) < self.num_beams:
            return False
        if self.early_stopping is True:
            return True
        if self.early_stopping is False or self.length_penalty <= 0:
            best = best_sum_logprobs / (cur_len - self.prompt_len) ** self.length_penalty
        else:  # "never" with a positive length penalty: the longest possible hypothesis
            best = best_sum_logprobs / (self.max_length - self.prompt_len) ** self.length_penalty
        return self.worst >= best


def beam_search(logprobs, prompt, num_beams, max_new_tokens, eos_ids, length_penalty=1.0, early_stopping=False,
                repetition=1.0, no_repeat_ngram=0):
    P = len(prompt)
    max_length = P + max_new_tokens
    hyps = Hypotheses(num_beams, length_penalty, early_stopping, max_length, P)
    beams = [list(prompt) for _ in range(num_beams)]
    # All beams start as the prompt; only the first may expand at the first step.
    scores = torch.full((num_beams,), -1e9, dtype=torch.float64)
    scores[0] = 0.0
    keep = max(2, 1 + len(eos_ids)) * num_beams
    cur_len, done = P, False
    while True:
        rows = []
        for seq in beams:
            s = logprobs(seq).clone()
            if repetition != 1.0:
                s = repetition_penalty(s, seq, repetition)
            rows.append(ban_repeated_ngrams(s, seq, no_repeat_ngram))
        total = torch.stack(rows) + scores[:, None]
        V = total.shape[1]
        top, index = total.view(-1).topk(keep)  # sorted, best first
        new_beams, new_scores = [], []
        for rank, (score, i) in enumerate(zip(top.tolist(), index.tolist())):
            beam, token = divmod(i, V)
            if token in eos_ids:
                if rank < num_beams:  # an eos outside the top num_beams candidates is not a hypothesis
                    hyps.add(beams[beam][P:], score, cur_len + 1 - P, True)
            else:
                new_beams.append(beams[beam] + [token])
                new_scores.append(score)
            if len(new_beams) == num_beams:
                break
        done = done or hyps.is_done(top[0].item(), cur_len + 1)
        beams, scores = new_beams, torch.tensor(new_scores, dtype=torch.float64)
        cur_len += 1
        if done or cur_len >= max_length:
            break
    if not done:
        for seq, score in zip(beams, scores.tolist()):
            hyps.add(seq[P:], score, len(seq) - P, False)
    best = sorted(hyps.beams, key=lambda h: h[0])[-1]
    return {"ids": best[1], "eos": best[2], "score": best[0]}
