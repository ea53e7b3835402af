"""An image classification service as people write it, for judging verdicts (not a fixture):
FastAPI, a plain ``def`` endpoint (run in anyio's worker threads, 40 by default), PIL decode of
a 1440x1080 JPEG + resize to 224x224 + normalise, then a small numpy model.

    uvicorn image_service:app --app-dir benchmarks/services --port 8101
    wrk -t2 -c32 -d10s http://127.0.0.1:8101/predict

Environment: ``DRAFT=1`` decodes in JPEG draft mode (at a reduced scale: the cheaper
preprocessing), ``POOL=N`` sets anyio's thread limiter to N (fewer request threads).
"""

import io
import itertools
import os
from contextlib import asynccontextmanager

import anyio.to_thread
import numpy as np
from fastapi import FastAPI
from PIL import Image

rng = np.random.default_rng(0)
IMAGES = []
for _ in range(8):
    pixels = (rng.random((1080, 1440, 3)) * 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    IMAGES.append(buffer.getvalue())
WEIGHTS = (rng.standard_normal((224 * 224 * 3 // 64, 10)) * 0.01).astype(np.float32)
DRAFT = os.environ.get("DRAFT") == "1"


@asynccontextmanager
async def lifespan(app):
    if os.environ.get("POOL"):
        anyio.to_thread.current_default_thread_limiter().total_tokens = int(os.environ["POOL"])
    yield


app = FastAPI(lifespan=lifespan)
counter = itertools.count()


def preprocess(data: bytes) -> np.ndarray:
    img = Image.open(io.BytesIO(data))
    if DRAFT:
        img.draft("RGB", (448, 448))
    img = img.convert("RGB").resize((224, 224), Image.BILINEAR)
    x = np.asarray(img, dtype=np.float32) / 255.0
    return (x - 0.45) / 0.225


def model(x: np.ndarray) -> int:
    features = x.reshape(-1, 64).mean(axis=1)
    return int(np.argmax(features[: WEIGHTS.shape[0]] @ WEIGHTS))


@app.get("/predict")
def predict():
    data = IMAGES[next(counter) % len(IMAGES)]
    return {"label": model(preprocess(data))}
