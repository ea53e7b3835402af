"""Frame categories and sample phases on synthetic stacks, one rule at a time.

The stacks are the shapes py-spy records (see fixtures/recorded/): Python frames named by their
qualified name (3.11+) or bare name (<= 3.10) with their source file, native frames named by
their symbol with their shared library (or, with debug info, their C source file) as file.
"""

from __future__ import annotations

import pytest

from diagnose.classify.categories import Categorizer
from diagnose.classify.rules_file import BadRules
from diagnose.samples.profile import Frame

SITE = "/srv/venv/lib/python3.11/site-packages"
LIB = "/usr/lib/python3.11"
APP = "/srv/app/service.py"
LIBPYTHON = "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
LIBTORCH = f"{SITE}/torch/lib/libtorch_cpu.so"
UMATH = f"{SITE}/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so"
OPENBLAS = f"{SITE}/numpy.libs/libscipy_openblas64_-32a4b2a6.so"
ORT = f"{SITE}/onnxruntime/capi/onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so"


def py(function, file=APP, line=1):
    return Frame(function, file, line, False)


def native(function, lib):
    return Frame(function, lib, 0, True)


@pytest.fixture(scope="module")
def cat():
    return Categorizer()


def category(cat, frame):
    return cat.categorize(frame).category


# The frames a request thread starts with: threading plumbing, the service's loop and handler.
THREAD = [py("Thread._bootstrap", f"{LIB}/threading.py", 995),
          py("Thread._bootstrap_inner", f"{LIB}/threading.py", 1038),
          py("Thread.run", f"{LIB}/threading.py", 975),
          py("request_loop"), py("handle_request")]
FORWARD = THREAD + [py("Model.predict"), py("Model.forward")]

# ---------------------------------------------------------------------------------------------
# Frame categories: each built-in rule


@pytest.mark.parametrize("frame, expected", [
    # library paths
    (py("dumps", f"{LIB}/json/__init__.py"), "postprocess"),
    (py("JSONEncoder.encode", f"{LIB}/json/encoder.py"), "postprocess"),
    (py("_Pickler.dump", f"{LIB}/pickle.py"), "postprocess"),
    (py("dumps", f"{SITE}/orjson/__init__.py"), "postprocess"),
    (py("Message.SerializeToString", f"{SITE}/google/protobuf/message.py"), "postprocess"),
    (py("Image.resize", f"{SITE}/PIL/Image.py"), "preprocess"),
    (native("ImagingResample", f"{SITE}/PIL/_imaging.cpython-311-x86_64-linux-gnu.so"), "preprocess"),
    (native("cv::resize", f"{SITE}/opencv_python.libs/libopencv_imgproc.so.4.9"), "preprocess"),
    (native("jpeg_read_scanlines", "/usr/lib/x86_64-linux-gnu/libjpeg.so.62"), "preprocess"),
    (py("Resize.forward", f"{SITE}/torchvision/transforms/transforms.py"), "preprocess"),
    (py("PreTrainedTokenizerBase.__call__", f"{SITE}/transformers/tokenization_utils_base.py"), "preprocess"),
    (py("Tokenizer.encode_batch", f"{SITE}/tokenizers/__init__.py"), "preprocess"),
    (py("_MapDatasetFetcher.fetch", f"{SITE}/torch/utils/data/_utils/fetch.py"), "preprocess"),
    (py("Compose.__call__", f"{SITE}/albumentations/core/composition.py"), "preprocess"),
    (py("Linear.forward", f"{SITE}/torch/nn/modules/linear.py"), "model"),
    (native("at::native::addmm_impl_cpu_", LIBTORCH), "model"),
    (native("c10::TensorImpl::~TensorImpl", f"{SITE}/torch/lib/libc10.so"), "model"),
    (native("dnnl::impl::cpu::x64::brgemm", f"{SITE}/torch/lib/libdnnl.so"), "model"),
    (py("Function.__call__", f"{SITE}/tensorflow/python/eager/polymorphic_function/polymorphic_function.py"), "model"),
    (py("cache_miss", f"{SITE}/jax/_src/pjit.py"), "model"),
    (native("xla::cpu::CpuExecutable::Execute", f"{SITE}/jaxlib/xla_extension.so"), "model"),
    (py("DecisionTreeClassifier.apply", f"{SITE}/sklearn/tree/_classes.py"), "model"),
    (py("Booster.inplace_predict", f"{SITE}/xgboost/core.py"), "model"),
    (py("dot", f"{SITE}/numpy/core/multiarray.py"), "model"),
    (native("FLOAT_add_AVX2", UMATH), "model"),
    (py("solve", f"{SITE}/scipy/linalg/_basic.py"), "model"),
    (native("sgemm_kernel_HASWELL", OPENBLAS), "model"),
    (native("inner_thread", "/opt/blas/libcustomblas.so"), "model"),  # by name: a BLAS kernel
    # function names (application code)
    (py("postprocess"), "postprocess"),
    (py("serialize_response"), "postprocess"),
    (py("softmax"), "postprocess"),
    (py("Detector.non_max_suppression"), "postprocess"),
    (py("decode_boxes"), "postprocess"),
    (py("format_response"), "postprocess"),
    (py("decode_image"), "preprocess"),
    (py("resize_image"), "preprocess"),
    (py("normalize"), "preprocess"),
    (py("tokenize"), "preprocess"),
    (py("extract_features"), "preprocess"),
    (py("letterbox"), "preprocess"),
    (py("Pipeline.preprocess"), "preprocess"),
    (py("Model.forward"), "model"),
    (py("forward"), "model"),  # CPython <= 3.10: no qualified names
    (py("Model.predict"), "model"),
    (py("predict"), "model"),
    (py("LLM.generate"), "model"),
    (py("run_model"), "model"),
    (py("YoloNet.__call__"), "model"),
    # sync, io, runtime
    (py("Condition.wait", f"{LIB}/threading.py", 320), "sync"),
    (py("Lock.__enter__", f"{LIB}/threading.py"), "sync"),
    (py("Queue.get", f"{LIB}/queue.py", 171), "sync"),
    (native("lock_PyThread_acquire_lock", LIBPYTHON), "sync"),
    (native("take_gil", LIBPYTHON), "sync"),
    (native("pthread_cond_timedwait", LIBC), "sync"),
    (native("_queue_SimpleQueue_get_impl", f"{LIB}/lib-dynload/_queue.cpython-311-x86_64-linux-gnu.so"), "sync"),
    (py("socket.recv_into", f"{LIB}/socket.py"), "io"),
    (py("HTTPConnection.request", f"{LIB}/http/client.py"), "io"),
    (py("Session.request", f"{SITE}/requests/sessions.py"), "io"),
    (py("Handler.emit", f"{LIB}/logging/__init__.py"), "io"),
    (native("select", LIBC), "io"),
    (native("time_sleep", LIBPYTHON), "io"),
    (native("clock_nanosleep", LIBC), "io"),
    (py("Thread.run", f"{LIB}/threading.py"), "runtime"),
    (py("_worker", f"{LIB}/concurrent/futures/thread.py"), "runtime"),
    (py("_find_and_load", "<frozen importlib._bootstrap>"), "runtime"),
    (native("_PyEval_EvalFrameDefault", LIBPYTHON), "runtime"),
    (native("_PyEval_EvalFrameDefault", "/usr/bin/python3.11"), "runtime"),  # static build
    (native("_PyEval_EvalFrameDefault", "python3.11"), "runtime"),  # raw format: no directory
    (native("start_thread", LIBC), "runtime"),
    (native("0x7f168bea3f16", "/opt/unknown.so"), "runtime"),
    (native("select_select_impl", "Modules/selectmodule.c"), "runtime"),
    # nothing names it
    (py("handle_request"), "other"),
    (py("Starlette.__call__", f"{SITE}/starlette/applications.py"), "other"),
])
def test_each_rule_names_its_category(cat, frame, expected):
    assert category(cat, frame) == expected


# ---------------------------------------------------------------------------------------------
# Library paths decide before function names


@pytest.mark.parametrize("frame", [
    py("softmax", f"{SITE}/torch/nn/functional.py", 1843),
    py("Softmax.forward", f"{SITE}/torch/nn/modules/activation.py", 1514),
    py("normalize", f"{SITE}/torch/nn/functional.py", 4656),
    py("interpolate", f"{SITE}/torch/nn/functional.py", 3939),
    py("Tensor.resize", f"{SITE}/torch/_tensor.py", 800),
    native("THPVariable_resize_", f"{SITE}/torch/lib/libtorch_python.so"),
    native("at::native::resize_", LIBTORCH),
    native("at::native::(anonymous namespace)::softmax_lastdim_kernel_impl", LIBTORCH),
    native("onnxruntime::contrib::Softmax<float>::Compute", ORT),
    native("onnxruntime::Resize<float>::Compute", ORT),
    py("softmax", f"{SITE}/tensorflow/python/ops/nn_ops.py"),
    py("softmax", f"{SITE}/jax/_src/nn/functions.py"),
])
def test_a_framework_frame_is_model_whatever_its_function_is_called(cat, frame):
    found = cat.categorize(frame)
    assert (found.category, found.framework, found.generic) == ("model", True, False)


@pytest.mark.parametrize("frame", [
    py("argmax", f"{SITE}/numpy/_core/fromnumeric.py", 1229),
    py("resize", f"{SITE}/numpy/_core/fromnumeric.py", 1518),
    py("softmax", f"{SITE}/scipy/special/_logsumexp.py", 250),
    native("PyArray_ArgMax", UMATH),
])
def test_numpy_and_scipy_frames_are_generic_framework_frames_whatever_their_name(cat, frame):
    found = cat.categorize(frame)
    assert (found.category, found.framework, found.generic) == ("model", True, True)


@pytest.mark.parametrize("frame, expected", [
    (native("list_resize", LIBPYTHON), "runtime"),
    (native("dictresize", "/usr/bin/python3.11"), "runtime"),
    (native("_PyBytes_Resize", "python3.11"), "runtime"),
    (native("list_resize", "Objects/listobject.c"), "runtime"),
    (native("dictresize", "dictobject.c"), "runtime"),
    (native("unicodedata_UCD_normalize_impl", "Modules/unicodedata.c"), "runtime"),
])
def test_interpreter_and_libc_symbols_never_take_a_phase_from_their_name(cat, frame, expected):
    assert category(cat, frame) == expected


def test_a_native_function_of_an_unknown_library_is_still_named_by_its_function(cat):
    assert category(cat, native("preprocess_batch", "/srv/app/_fastpre.so")) == "preprocess"


def test_framework_model_entry_points_are_model_calls_not_framework_internals(cat):
    for frame in (py("Session.run", f"{SITE}/onnxruntime/capi/onnxruntime_inference_collection.py", 220),
                  py("InferenceSession.run", f"{SITE}/onnxruntime/capi/onnxruntime_inference_collection.py"),
                  py("Model.predict", f"{SITE}/keras/src/trainers/trainer.py"),
                  py("Pipeline.predict", f"{SITE}/sklearn/pipeline.py", 507),
                  py("Booster.predict", f"{SITE}/lightgbm/basic.py")):
        found = cat.categorize(frame)
        assert (found.category, found.framework) == ("model", False), frame


# ---------------------------------------------------------------------------------------------
# User rules


def test_user_patterns_are_tried_first_even_before_library_paths():
    user = {"category": [{"name": "postprocess", "patterns": [{"function": "^softmax$"}]},
                         {"name": "preprocess", "patterns": [{"file": "/srv/app/features/"}]}]}
    cat = Categorizer(user)
    assert category(cat, py("softmax", f"{SITE}/torch/nn/functional.py")) == "postprocess"
    assert category(cat, py("Model.forward", "/srv/app/features/embed.py")) == "preprocess"
    assert category(cat, py("log_softmax", f"{SITE}/torch/nn/functional.py")) == "model"


def test_a_user_framework_pattern_takes_its_callers_phase():
    cat = Categorizer({"category": [{"name": "model", "patterns": [
        {"file": "/mylib/", "framework": True}]}]})
    kernel = py("fast_resize", "/srv/venv/mylib/ops.py")
    assert cat.categorize(kernel).framework
    assert cat.phase_of(THREAD + [py("decode_image"), kernel]) == "preprocess"
    assert cat.phase_of(THREAD + [kernel]) == "model"


@pytest.mark.parametrize("rules, message", [
    ({"category": [{"name": "inference", "patterns": [{"function": "x"}]}]}, "unknown category"),
    ({"category": [{"name": "model", "patterns": [{"generic": True}]}]}, "needs 'function' or 'file'"),
    ({"category": [{"name": "model", "patterns": [{"function": "("}]}]}, "invalid regular expression"),
])
def test_bad_user_rules_are_refused_with_the_reason(rules, message):
    with pytest.raises(BadRules, match=message):
        Categorizer(rules)


# ---------------------------------------------------------------------------------------------
# Sample phases


def test_torch_softmax_inside_a_models_forward_is_model(cat):
    stack = FORWARD + [py("softmax", f"{SITE}/torch/nn/functional.py", 1843),
                       native("at::native::(anonymous namespace)::softmax_lastdim_kernel_impl", LIBTORCH)]
    assert cat.phase_of(stack) == "model"
    assert cat.phase_of(stack[:-1]) == "model"  # Python frames only


def test_tensor_resize_inside_a_models_forward_is_model(cat):
    stack = FORWARD + [native("THPVariable_resize_", f"{SITE}/torch/lib/libtorch_python.so"),
                       native("at::native::resize_", LIBTORCH)]
    assert cat.phase_of(stack) == "model"


def test_numpy_named_like_postprocessing_inside_forward_is_model(cat):
    stack = FORWARD + [py("argmax", f"{SITE}/numpy/_core/fromnumeric.py"),
                       py("_wrapfunc", f"{SITE}/numpy/_core/fromnumeric.py"),
                       native("PyArray_ArgMax", UMATH)]
    assert cat.phase_of(stack) == "model"


def test_bare_forward_of_python_3_10_and_older_is_a_model_call(cat):
    stack = THREAD[:3] + [py("request_loop"), py("handle_request"), py("predict"), py("forward"),
                          py("softmax", f"{SITE}/torch/nn/functional.py")]
    assert cat.phase_of(stack) == "model"


def test_a_whole_model_inside_an_onnxruntime_session_is_model(cat):
    stack = THREAD + [py("preprocess_and_run"),
                      py("Session.run", f"{SITE}/onnxruntime/capi/onnxruntime_inference_collection.py", 220),
                      native("onnxruntime::contrib::Softmax<float>::Compute", ORT)]
    assert cat.phase_of(stack) == "model"


def test_preprocessing_code_calling_framework_ops_stays_preprocessing(cat):
    resize = THREAD + [py("preprocess"), py("resize_image"),
                       py("interpolate", f"{SITE}/torch/nn/functional.py", 3939),
                       native("at::native::upsample_bilinear2d_out_cpu", LIBTORCH)]
    assert cat.phase_of(resize) == "preprocess"
    tokens = THREAD + [py("tokenize"), py("asarray", f"{SITE}/numpy/_core/numeric.py"),
                       native("PyArray_FromAny", UMATH)]
    assert cat.phase_of(tokens) == "preprocess"
    assert cat.phase_of(THREAD + [py("tokenize")]) == "preprocess"


def test_postprocessing_code_calling_framework_ops_stays_postprocessing(cat):
    torch_softmax = THREAD + [py("postprocess"), py("softmax", f"{SITE}/torch/nn/functional.py")]
    assert cat.phase_of(torch_softmax) == "postprocess"
    # fixtures/recorded/lock_contention.native: postprocess > numpy argsort > native sort
    argsort = THREAD + [py("postprocess"), native("dispatcher_vectorcall", UMATH),
                        py("argsort", f"{SITE}/numpy/_core/fromnumeric.py"),
                        py("_wrapfunc", f"{SITE}/numpy/_core/fromnumeric.py"),
                        native("array_argsort", UMATH), native("PyArray_ArgSort", UMATH)]
    assert cat.phase_of(argsort) == "postprocess"
    nn_module = THREAD + [py("postprocess"),
                          py("Module._call_impl", f"{SITE}/torch/nn/modules/module.py"),
                          py("Softmax.forward", f"{SITE}/torch/nn/modules/activation.py")]
    assert cat.phase_of(nn_module) == "postprocess"


def test_application_code_inside_forward_keeps_the_phase_its_name_says(cat):
    # An application function named for postprocessing is postprocessing, even when the model's
    # forward calls it; the framework op it calls takes its phase.
    stack = FORWARD + [py("Detector.postprocess_boxes"),
                       py("nms", f"{SITE}/torchvision/ops/boxes.py"),
                       py("batched_nms", f"{SITE}/torch/_ops.py")]
    assert cat.phase_of(stack) == "postprocess"
    inner_model = THREAD + [py("preprocess"), py("Embedder.forward"),
                            py("linear", f"{SITE}/torch/nn/functional.py")]
    assert cat.phase_of(inner_model) == "model"


def test_framework_frames_alone_are_model_and_numpy_alone_is_model_last(cat):
    assert cat.phase_of(THREAD + [py("softmax", f"{SITE}/torch/nn/functional.py")]) == "model"
    assert cat.phase_of(THREAD + [native("sgemm_kernel_HASWELL", OPENBLAS)]) == "model"
    # a specific phase anywhere beats numpy, innermost or not
    assert cat.phase_of(THREAD + [py("decode_image"), py("frombuffer", f"{SITE}/numpy/_core/numeric.py"),
                                  native("memcpy", LIBC)]) == "preprocess"


def test_a_phase_library_decides_inside_a_model_call(cat):
    # PIL and json are a phase wherever they run: they are not framework internals.
    stack = FORWARD + [py("Image.resize", f"{SITE}/PIL/Image.py"),
                       native("ImagingResample", f"{SITE}/PIL/_imaging.cpython-311-x86_64-linux-gnu.so")]
    assert cat.phase_of(stack) == "preprocess"
    transforms = THREAD + [py("Compose.__call__", f"{SITE}/torchvision/transforms/transforms.py"),
                           py("Module._call_impl", f"{SITE}/torch/nn/modules/module.py"),
                           py("interpolate", f"{SITE}/torch/nn/functional.py")]
    assert cat.phase_of(transforms) == "preprocess"


def test_interpreter_internals_under_forward_do_not_turn_it_into_preprocessing(cat):
    stack = FORWARD + [native("_PyEval_EvalFrameDefault", LIBPYTHON), native("list_append", LIBPYTHON),
                       native("list_resize", LIBPYTHON)]
    assert cat.phase_of(stack) == "model"


def test_a_data_loader_worker_is_preprocessing(cat):
    stack = [py("_worker_loop", f"{SITE}/torch/utils/data/_utils/worker.py", 308),
             py("_MapDatasetFetcher.fetch", f"{SITE}/torch/utils/data/_utils/fetch.py", 51),
             py("ImageDataset.__getitem__", "/srv/app/data.py"),
             py("from_numpy", f"{SITE}/torch/__init__.py")]
    assert cat.phase_of(stack) == "preprocess"


def test_a_forked_workers_parent_frames_do_not_change_its_phase(cat):
    # fixtures/workloads/process_pool.py: a forked worker keeps the parent's frames.
    parent = [py("<module>", "/srv/app/pool.py"), py("main", "/srv/app/pool.py"),
              py("run_processes", "/srv/app/pool.py"),
              py("BaseProcess.start", f"{LIB}/multiprocessing/process.py"),
              py("Popen._launch", f"{LIB}/multiprocessing/popen_fork.py"),
              py("BaseProcess._bootstrap", f"{LIB}/multiprocessing/process.py"),
              py("BaseProcess.run", f"{LIB}/multiprocessing/process.py"), py("worker_main", "/srv/app/pool.py")]
    assert cat.phase_of(parent + [py("handle_request"), py("extract_features")]) == "preprocess"
    assert cat.phase_of(parent + [py("handle_request"), py("Model.predict"),
                                  native("sgemm_kernel_HASWELL", OPENBLAS)]) == "model"


def test_stacks_without_a_phase_frame_are_other(cat):
    assert cat.phase_of([]) == "other"
    assert cat.phase_of(THREAD) == "other"
    assert cat.phase_of(THREAD + [py("Queue.get", f"{LIB}/queue.py"),
                                  py("Condition.wait", f"{LIB}/threading.py"),
                                  native("pthread_cond_timedwait", LIBC)]) == "other"
