"""Files people send reach the turn: saved under the conversation's directory, bounded
by attachments.max_bytes, nothing half-saved; the agent is told where they are."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from gateway.daemon.assembly import running_gateway
from tests.conftest import make_config
from tests.fakes.media import png
from tests.fakes.openai_server import Say
from tests.model_support import model_config, web_base
from tests.test_web import open_tab


def _form(name: str, data: bytes, text: str | None = None) -> aiohttp.FormData:
    form = aiohttp.FormData()
    if text is not None:
        form.add_field("text", text)
    form.add_field("file", data, filename=name, content_type="text/plain")
    return form


async def test_a_web_upload_is_saved_and_handed_to_the_turn(tmp_path: Path, http) -> None:
    async with running_gateway(make_config(tmp_path / "home")) as gw:
        base = web_base(gw)
        tab = await open_tab(http, base)
        url = f"{base}/api/sessions/{tab.ready['session_id']}/files"
        async with http.post(url, data=_form("notes.txt", b"hello", "my notes")) as r:
            assert r.status == 200
            saved = (await r.json())["file"]
        answer = await tab.frame()
    path = Path(saved["path"])
    assert path.read_bytes() == b"hello" and saved["size"] == 5
    assert path.parent == tmp_path / "home" / "files" / f"web-{tab.ready['conversation']}"
    assert answer["kind"] == "reply" and str(path) in answer["text"]
    assert "notes.txt (text/plain, 5 bytes)" in answer["text"]


async def test_a_file_over_the_limit_is_refused_and_leaves_nothing(tmp_path: Path,
                                                                   http) -> None:
    config = make_config(tmp_path / "home", attachments__max_bytes=1000)
    async with running_gateway(config) as gw:
        base = web_base(gw)
        tab = await open_tab(http, base)
        url = f"{base}/api/sessions/{tab.ready['session_id']}/files"
        async with http.post(url, data=_form("big.bin", b"x" * 5000)) as r:
            assert r.status == 413
            assert "attachments.max_bytes" in (await r.json())["error"]
        await tab.no_frame(0.3)
    leftovers = list((tmp_path / "home" / "files").rglob("*"))
    assert [p for p in leftovers if p.is_file()] == []


async def test_upload_requests_are_checked(tmp_path: Path, http) -> None:
    async with running_gateway(make_config(tmp_path / "home")) as gw:
        base = web_base(gw)
        async with http.post(f"{base}/api/sessions/nope/files",
                             data=_form("a.txt", b"a")) as r:
            assert r.status == 404
        tab = await open_tab(http, base)
        url = f"{base}/api/sessions/{tab.ready['session_id']}/files"
        async with http.post(url, json={"file": "a"}) as r:
            assert r.status == 400
        form = aiohttp.FormData()
        form.add_field("text", "no file here")
        async with http.post(url, data=form) as r:
            assert r.status == 400 and "file" in (await r.json())["error"]


async def test_the_model_is_told_the_files_name_type_size_and_path(tmp_path: Path, model,
                                                                    http) -> None:
    model.brain = lambda req: Say("got it")
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        base = web_base(gw)
        tab = await open_tab(http, base)
        url = f"{base}/api/sessions/{tab.ready['session_id']}/files"
        async with http.post(url, data=_form("report.txt", b"12345678", "read this")) as r:
            saved = (await r.json())["file"]
        assert (await tab.frame())["text"] == "got it"
    told = model.requests[-1].last["content"]
    assert told.startswith("read this\n")
    assert f"[Attached file: report.txt (text/plain, 8 bytes), saved at {saved['path']}]" in told


async def test_a_photo_and_a_document_in_topic_42_are_saved_for_the_turn(
        tmp_path: Path) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM, telegram_config

    topic = dict(chat_id=FORUM, chat_type="supergroup", is_forum=True, thread_id=42,
                 is_topic_message=True)
    jpeg = b"\xff\xd8\xff\xe0" + b"photo-bytes" * 100
    async with FakeTelegram() as telegram:
        async with running_gateway(telegram_config(tmp_path / "home", telegram)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            telegram.user_photo(data=jpeg, caption="the dashboard", **topic)
            telegram.user_document(data=b"a,b\n1,2\n", file_name="data.csv", **topic)
            answers = await telegram.wait_for_sent(2, timeout=30)
    assert [a.message_thread_id for a in answers] == [42, 42]
    directory = tmp_path / "home" / "files" / f"telegram-{FORUM}-42"
    photo, document = sorted(directory.iterdir(), key=lambda p: "data.csv" in p.name)
    assert photo.read_bytes() == jpeg and document.read_bytes() == b"a,b\n1,2\n"
    assert str(photo) in answers[0].text and "the dashboard" in answers[0].text
    assert str(document) in answers[1].text and "data.csv (text/csv, 8 bytes)" in answers[1].text


async def test_a_file_too_large_for_the_bot_api_is_refused_with_a_message(
        tmp_path: Path) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import ALICE, telegram_config

    async with FakeTelegram() as telegram:
        async with running_gateway(telegram_config(tmp_path / "home", telegram)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            telegram.user_document(chat_id=ALICE, data=b"x", file_name="huge.iso",
                                   size_override=30 * 1024 * 1024)
            (answer,) = await telegram.wait_for_sent(1, timeout=30)
    assert "huge.iso (30.0 MB) was not saved" in answer.text
    assert "attachments.max_bytes" in answer.text
    assert not [p for p in (tmp_path / "home" / "files").rglob("*") if p.is_file()]


async def test_a_discord_attachment_in_a_thread_is_saved_for_the_turn(
        tmp_path: Path, discord_endpoints) -> None:
    from tests.fakes.discord_server import FakeDiscord
    from tests.test_discord import CHANNEL, THREAD_A

    async with FakeDiscord() as fake:
        fake.add_channel(CHANNEL, "builds")
        fake.add_thread(THREAD_A, CHANNEL)
        config = make_config(
            tmp_path / "home", platforms__discord__enabled=True,
            platforms__discord__token=fake.token, platforms__discord__api_base=fake.api_base,
            platforms__discord__gateway_url=fake.gateway_url,
            platforms__discord__guild_ready_timeout_seconds=fake.guild_ready_timeout,
            platforms__discord__allowed_users=["1"])
        async with running_gateway(config) as gw:
            await gw.runner.adapters["discord"].wait_connected(timeout=30)
            await fake.user_message(content="the log", channel_id=THREAD_A, attachments=[
                {"filename": "build.log", "data": b"error: x\n", "content_type": "text/plain"}])
            (answer,) = await fake.wait_for_sent(1, timeout=30)
    (saved,) = (tmp_path / "home" / "files" / f"discord-{THREAD_A}-{THREAD_A}").iterdir()
    assert saved.read_bytes() == b"error: x\n" and saved.name.endswith("build.log")
    assert answer.channel_id == THREAD_A and str(saved) in (answer.content or "")


async def test_send_posts_a_file_in_topic_42_and_refuses_one_outside_the_roots(
        tmp_path: Path) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM, telegram_config

    root = tmp_path / "out"
    root.mkdir()
    (root / "chart.png").write_bytes(png(4, 3))
    (root / "report.txt").write_bytes(b"all good\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("no")
    topic = dict(chat_id=FORUM, chat_type="supergroup", is_forum=True, thread_id=42,
                 is_topic_message=True)
    async with FakeTelegram() as telegram:
        config = telegram_config(tmp_path / "home", telegram,
                                 attachments__send_roots=[str(root)])
        async with running_gateway(config) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            telegram.user_message(text=f"/send {root / 'chart.png'} the chart", **topic)
            telegram.user_message(text=f"/send {root / 'report.txt'}", **topic)
            telegram.user_message(text=f"/send {outside}", **topic)
            photo, document = await telegram.wait_for_files(2, timeout=30)
            (refusal,) = await telegram.wait_for_sent(1, timeout=30)
            # 1×40: Telegram will not take it as a photo; it goes as a document
            (root / "strip.png").write_bytes(png(1, 40))
            telegram.user_message(text=f"/send {root / 'strip.png'}", **topic)
            *_, strip = await telegram.wait_for_files(3, timeout=30)
    assert (strip.method, strip.filename, strip.message_thread_id) == (
        "sendDocument", "strip.png", 42)
    assert len(telegram.sent) == 1  # no error message: the file went
    assert (photo.method, photo.message_thread_id, photo.caption) == ("sendPhoto", 42,
                                                                      "the chart")
    assert (document.method, document.filename, document.data) == (
        "sendDocument", "report.txt", b"all good\n")
    assert document.message_thread_id == 42
    assert refusal.message_thread_id == 42 and "outside the directories" in refusal.text


async def test_the_model_posts_a_file_with_send_file(tmp_path: Path, model, http) -> None:
    from tests.fakes.openai_server import CallTools, ChatRequest, Response

    files = tmp_path / "home" / "files"

    def brain(req: ChatRequest) -> Response:
        if req.last["role"] == "tool":
            return Say(f"sent: {req.last['content']}")
        return CallTools([("send_file", {"path": str(report), "caption": "the report"})])

    model.brain = brain
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        base = web_base(gw)
        tab = await open_tab(http, base)
        # the conversation's own files may be posted; another conversation's may not
        report = files / f"web-{tab.ready['conversation']}" / "report.txt"
        report.parent.mkdir(parents=True)
        report.write_text("numbers\n")
        await tab.say("send me the report")
        posted = await tab.frame()
        answer = await tab.frame()
        assert posted["file"]["name"] == "report.txt" and posted["text"] == "the report"
        async with http.get(base + posted["file"]["url"]) as r:
            assert r.status == 200 and await r.read() == b"numbers\n"
        async with http.get(f"{base}/api/files", params={"path": "/etc/passwd"}) as r:
            assert r.status == 404
    assert '"sent": true' in answer["text"]


async def test_send_posts_a_file_into_a_discord_thread(tmp_path: Path,
                                                        discord_endpoints) -> None:
    from tests.fakes.discord_server import FakeDiscord
    from tests.test_discord import CHANNEL, THREAD_A

    root = tmp_path / "out"
    root.mkdir()
    (root / "build.log").write_bytes(b"ok\n")
    async with FakeDiscord() as fake:
        fake.add_channel(CHANNEL, "builds")
        fake.add_thread(THREAD_A, CHANNEL)
        config = make_config(
            tmp_path / "home", platforms__discord__enabled=True,
            platforms__discord__token=fake.token, platforms__discord__api_base=fake.api_base,
            platforms__discord__gateway_url=fake.gateway_url,
            platforms__discord__guild_ready_timeout_seconds=fake.guild_ready_timeout,
            platforms__discord__allowed_users=["1"], attachments__send_roots=[str(root)])
        async with running_gateway(config) as gw:
            await gw.runner.adapters["discord"].wait_connected(timeout=30)
            await fake.user_message(content=f"/send {root / 'build.log'} the log",
                                    channel_id=THREAD_A)
            (posted,) = await fake.wait_for_sent(1, timeout=30)
    assert posted.channel_id == THREAD_A and posted.content == "the log"
    assert [(f.filename, f.data) for f in posted.attachments] == [("build.log", b"ok\n")]


async def test_with_vision_the_model_sees_the_latest_image_and_earlier_ones_by_path(
        tmp_path: Path, model, http) -> None:
    import base64

    model.brain = lambda req: Say("I see it")
    config = model_config(tmp_path / "home", model, agent__vision=True)
    picture = png(2, 2)
    async with running_gateway(config) as gw:
        base = web_base(gw)
        tab = await open_tab(http, base)
        url = f"{base}/api/sessions/{tab.ready['session_id']}/files"
        for name in ("first.png", "second.png"):
            form = aiohttp.FormData()
            form.add_field("text", f"look at {name}")
            form.add_field("file", picture, filename=name, content_type="image/png")
            async with http.post(url, data=form) as r:
                assert r.status == 200
            assert (await tab.frame())["text"] == "I see it"
    first, second = model.requests[0], model.requests[1]
    (image,) = [p for p in first.last["content"] if p["type"] == "image_url"]
    inline = "data:image/png;base64," + base64.b64encode(picture).decode()
    assert image["image_url"]["url"] == inline
    # the second request: its own image inline, the first one as a line saying where it is
    earlier = [m for m in second.messages if m["role"] == "user"][0]
    assert isinstance(earlier["content"], str) and "(an image was attached here: " in \
        earlier["content"]
    assert [p["type"] for p in second.last["content"]] == ["text", "image_url"]


async def test_without_vision_an_image_is_a_file_the_model_is_told_of(
        tmp_path: Path, model, http) -> None:
    model.brain = lambda req: Say("noted")
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        base = web_base(gw)
        tab = await open_tab(http, base)
        form = aiohttp.FormData()
        form.add_field("file", png(2, 2), filename="pic.png", content_type="image/png")
        async with http.post(f"{base}/api/sessions/{tab.ready['session_id']}/files",
                             data=form) as r:
            assert r.status == 200
        await tab.frame()
    told = model.requests[-1].last["content"]
    assert isinstance(told, str) and "[Attached file: pic.png (image/png, " in told


async def test_a_voice_note_is_transcribed_for_the_model_in_its_topic(tmp_path: Path,
                                                                      model) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.model_support import model_settings
    from tests.test_telegram import FORUM, telegram_config

    model.transcribe = lambda data: "deploy the staging box" if data == b"OggS-voice" else "?"
    model.brain = lambda req: Say("on it")
    async with FakeTelegram() as telegram:
        config = telegram_config(
            tmp_path / "home", telegram, **model_settings(model),
            agent__transcription={"base_url": model.base_url, "model": "whisper-1"})
        async with running_gateway(config) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            telegram.user_voice(chat_id=FORUM, data=b"OggS-voice", chat_type="supergroup",
                                is_forum=True, thread_id=42, is_topic_message=True)
            (answer,) = await telegram.wait_for_sent(1, timeout=30)
    assert answer.message_thread_id == 42 and "on it" in answer.text
    assert [(m, d) for m, _, d in model.transcriptions] == [("whisper-1", b"OggS-voice")]
    told = model.requests[-1].last["content"]
    assert "[Transcript of voice-" in told and ": deploy the staging box]" in told
    assert "[Attached file: voice-" in told  # and the file itself, should the model want it


async def test_a_jobs_artifact_is_posted_with_its_completion_notice(tmp_path: Path, model,
                                                                    http) -> None:
    from tests.fakes.openai_server import CallTools, ChatRequest, Response
    from tests.model_support import is_notice

    out = tmp_path / "out"
    out.mkdir()
    report = out / "report.txt"

    def brain(req: ChatRequest) -> Response:
        if is_notice(req):
            return Say("The report is ready.")
        if req.last["role"] == "tool":
            return Say("Started.")
        return CallTools([("terminal", {"command": f"sleep 0.3; echo done > {report}",
                                        "background": True, "artifact": str(report)})])

    model.brain = brain
    config = model_config(tmp_path / "home", model, attachments__send_roots=[str(out)])
    async with running_gateway(config) as gw:
        base = web_base(gw)
        tab = await open_tab(http, base)
        await tab.say("make the report")
        assert (await tab.frame())["text"] == "Started."
        notice = await tab.frame(15)
        posted = await tab.frame(15)
        assert notice["kind"] == "notification" and notice["text"].endswith(
            "The report is ready.")
        assert posted["file"]["name"] == "report.txt"
        async with http.get(base + posted["file"]["url"]) as r:
            assert await r.read() == b"done\n"
        await tab.no_frame(0.3)



async def test_another_conversations_files_cannot_be_sent(tmp_path: Path, http) -> None:
    async with running_gateway(make_config(tmp_path / "home")) as gw:
        base = web_base(gw)
        mine, theirs = await open_tab(http, base), await open_tab(http, base)
        secret = tmp_path / "home" / "files" / f"web-{theirs.ready['conversation']}" / "x.txt"
        secret.parent.mkdir(parents=True)
        secret.write_text("theirs")
        await mine.say(f"/send {secret}")
        refusal = await mine.frame()
    assert refusal["kind"] == "system" and "outside the directories" in refusal["text"]


def test_names_keep_their_extension_and_stay_short() -> None:
    from gateway.inbound.files import IncomingFile, safe_name

    def named(name: str) -> str:
        return safe_name(IncomingFile("upload", name, None, None, ""))

    assert named("文件.png") == "upload.png" and named("отчет.pdf") == "upload.pdf"
    assert named("../../etc/passwd") == "passwd" and named(".bashrc") == "bashrc"
    assert named("a" * 300 + ".txt") == "a" * 100 + ".txt"


async def test_two_saves_of_one_name_at_once_keep_both(tmp_path: Path) -> None:
    import asyncio

    from gateway.inbound.files import IncomingFile, save

    async def chunks(data: bytes):  # noqa: ANN202
        for _ in range(50):
            await asyncio.sleep(0)  # a chunk at a time, so the two saves interleave
            yield data

    file = IncomingFile("upload", "same.txt", None, None, "")
    a, b = await asyncio.gather(save(file, chunks(b"A"), tmp_path, 10_000),
                                save(file, chunks(b"B"), tmp_path, 10_000))
    assert a.path != b.path
    assert {Path(a.path).read_bytes(), Path(b.path).read_bytes()} == {b"A" * 50, b"B" * 50}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
