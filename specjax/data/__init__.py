"""Corpus reading, tokenizer training/loading, deterministic resumable batching;
real data: ShareGPT (``sharegpt``), chat tokenization with an assistant loss mask
(``chat_tokenize``), evaluation prompts (``eval_prompts``), HumanEval
(``humaneval``), a sandboxed executor (``sandbox``) and pass@k (``pass_at_k``)."""
