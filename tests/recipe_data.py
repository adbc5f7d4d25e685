"""Tiny parallel corpora in real languages for the recipe tests (no network)."""

import os
import random
import subprocess
import sys

from shared_builds import build_once

# (en, de, zh, ja) phrase tables: subject, verb phrase, object
_SUBJ = [("The cat", "Die Katze", "猫", "猫は"), ("My brother", "Mein Bruder", "我的哥哥", "私の兄は"),
         ("The teacher", "Der Lehrer", "老师", "先生は"), ("A small child", "Ein kleines Kind", "一个小孩子", "小さな子供は"),
         ("The government", "Die Regierung", "政府", "政府は"), ("Our neighbour", "Unser Nachbar", "我们的邻居", "隣人は")]
_VERB = [("reads", "liest", "读", "を読む"), ("buys", "kauft", "买", "を買う"), ("sees", "sieht", "看见", "を見る"),
         ("likes", "mag", "喜欢", "が好きだ"), ("needs", "braucht", "需要", "が必要だ")]
_OBJ = [("a new book", "ein neues Buch", "一本新书", "新しい本"), ("the newspaper", "die Zeitung", "报纸", "新聞"),
        ("a red car", "ein rotes Auto", "一辆红色的汽车", "赤い車"), ("the old house", "das alte Haus", "那座老房子", "古い家"),
        ("fresh bread", "frisches Brot", "新鲜的面包", "新鮮なパン"), ("a well-known film", "einen bekannten Film", "一部有名的电影", "有名な映画")]
_IDX = {"en": 0, "de": 1, "zh": 2, "ja": 3}


def sentence(rng, lang_a, lang_b):
    s, v, o = rng.choice(_SUBJ), rng.choice(_VERB), rng.choice(_OBJ)
    out = []
    for lang in (lang_a, lang_b):
        i = _IDX[lang]
        if lang in ("en", "de"):
            out.append(f"{s[i]} {v[i]} {o[i]}.")
        elif lang == "zh":
            out.append(f"{s[i]}{v[i]}{o[i]}。")
        else:
            out.append(f"{s[i]}{o[i]}{v[i]}。")
    return out


def write_pair(out_dir, src, tgt, sizes=(("train", 120), ("valid", 12), ("test", 12)), seed=0):
    """Files {split}.{lang}; returns the env vars TRAIN_SRC=... for a recipe."""
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(seed)
    env = {}
    for split, n in sizes:
        pairs = [sentence(rng, src, tgt) for _ in range(n)]
        for lang, col in ((src, 0), (tgt, 1)):
            path = os.path.join(out_dir, f"{split}.{lang}")
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(p[col] + "\n" for p in pairs)
            env[f"{split.upper()}_{'SRC' if col == 0 else 'TGT'}"] = path
    return env


def parallel_lines(src, tgt, n, seed=0):
    """n aligned sentence pairs (two lists of lines)."""
    rng = random.Random(seed)
    pairs = [sentence(rng, src, tgt) for _ in range(n)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def write_archive(path, members):
    """A .tgz/.tar.gz or .zip at ``path`` holding ``members`` {name inside: list of lines}:
    a local stand-in for a downloaded corpus archive."""
    import io
    import tarfile
    import zipfile
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = {name: "".join(line + "\n" for line in lines).encode("utf-8") for name, lines in members.items()}
    if path.endswith(".zip"):
        with zipfile.ZipFile(path, "w") as z:
            for name, blob in data.items():
                z.writestr(name, blob)
    else:
        with tarfile.open(path, "w:gz") as t:
            for name, blob in data.items():
                info = tarfile.TarInfo(name)
                info.size = len(blob)
                t.addfile(info, io.BytesIO(blob))
    return path


def bible_corpus() -> str:
    """The folder of the bible corpus step (``python -m fairseq_attn_recipes bible-corpus``: the
    package's verse pairs split by chapter, the gold alignments of valid and test), made once per
    test run (:mod:`shared_builds`); the tests only read it."""
    def make(folder):
        p = subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", "bible-corpus", "--out", folder,
                            "--src-lang", "grc", "--tgt-lang", "en"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr

    return build_once("bible_corpus", make)
