"""An OpenAI-compatible HTTP server (needs the `serve` extra: FastAPI, uvicorn)."""

from keras_gen.serving.api_error import APIError
from keras_gen.serving.batch_scheduler import BatchScheduler
from keras_gen.serving.chat_template import ChatTemplate
from keras_gen.serving.completion_request import CompletionRequest
from keras_gen.serving.generation_job import GenerationJob
from keras_gen.serving.openai_app import create_app
from keras_gen.serving.openai_app import serve
