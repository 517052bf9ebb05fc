"""The pages' words in Chinese and English, and which language a request gets.

The language follows the browser (`Accept-Language`) unless the person chose one (`?lang=zh|en`, kept in
the `um_lang` cookie). Every key exists in both languages (tests/test_console_unit.py checks it).
"""

from __future__ import annotations

from collections.abc import Mapping

LANGUAGES = ("en", "zh")
LANG_COOKIE = "um_lang"

STRINGS: Mapping[str, Mapping[str, str]] = {
    "app": {"en": "usermem", "zh": "usermem"},
    "console": {"en": "Operator console", "zh": "运营控制台"},
    "me": {"en": "My memory", "zh": "我的记忆"},
    "docs": {"en": "API documentation", "zh": "API 文档"},
    "health": {"en": "Health", "zh": "健康检查"},
    "landing_intro": {"en": "Long-term user memory for AI agents.", "zh": "面向 AI 智能体的长期用户记忆服务。"},
    "language": {"en": "Language", "zh": "语言"},
    "skip": {"en": "Skip to content", "zh": "跳到正文"},
    "sign_in": {"en": "Sign in", "zh": "登录"},
    "sign_out": {"en": "Sign out", "zh": "退出"},
    "admin_key": {"en": "Admin API key", "zh": "管理员 API 密钥"},
    "admin_key_help": {"en": "An admin key of your tenant (umk_…). It is not stored in the browser.",
                       "zh": "您租户的管理员密钥（umk_…），不会保存在浏览器中。"},
    "user_token": {"en": "Your access token", "zh": "您的访问令牌"},
    "user_token_help": {"en": "The token the application gave you for this page.",
                        "zh": "应用为此页面提供给您的令牌。"},
    "bad_key": {"en": "That key is not a valid admin key.", "zh": "该密钥不是有效的管理员密钥。"},
    "bad_token": {"en": "That token is not valid.", "zh": "该令牌无效。"},
    "signed_in_as": {"en": "Tenant", "zh": "租户"},
    "nav": {"en": "Main navigation", "zh": "主导航"},
    "users": {"en": "Users", "zh": "用户"},
    "contracts": {"en": "Field contracts", "zh": "字段契约"},
    "grants": {"en": "Grants", "zh": "授权"},
    "audit": {"en": "Audit log", "zh": "审计日志"},
    "search_users": {"en": "Search users by id prefix", "zh": "按用户 ID 前缀搜索"},
    "search": {"en": "Search", "zh": "搜索"},
    "no_users": {"en": "No users found.", "zh": "没有找到用户。"},
    "more": {"en": "More", "zh": "更多"},
    "user": {"en": "User", "zh": "用户"},
    "memories": {"en": "Memories", "zh": "记忆"},
    "no_memories": {"en": "Nothing is remembered.", "zh": "没有任何记忆。"},
    "kind_fact": {"en": "Facts", "zh": "事实"},
    "kind_preference": {"en": "Preferences", "zh": "偏好"},
    "kind_situation": {"en": "Situations", "zh": "近况"},
    "kind_episode": {"en": "Episodes", "zh": "经历"},
    "kind_context": {"en": "Session context", "zh": "会话上下文"},
    "source": {"en": "Source", "zh": "来源"},
    "weight": {"en": "Weight", "zh": "权重"},
    "needs_confirmation": {"en": "Needs confirmation", "zh": "需要确认"},
    "expires": {"en": "Expires", "zh": "过期时间"},
    "never": {"en": "never", "zh": "永不"},
    "history": {"en": "Versions", "zh": "版本"},
    "value": {"en": "Value", "zh": "值"},
    "actor": {"en": "Actor", "zh": "操作者"},
    "time": {"en": "Time", "zh": "时间"},
    "current": {"en": "current", "zh": "当前"},
    "retracted": {"en": "denied", "zh": "已否认"},
    "revert": {"en": "Revert to this version", "zh": "恢复到此版本"},
    "reverted": {"en": "Reverted: a new version restores the chosen value.", "zh": "已恢复：新版本恢复了所选的值。"},
    "decay_chart": {"en": "Weight over time", "zh": "权重随时间变化"},
    "chart_confirm_line": {"en": "confirm below 0.55", "zh": "低于 0.55 需确认"},
    "chart_drop_line": {"en": "dropped below 0.3", "zh": "低于 0.3 不再召回"},
    "chart_created": {"en": "written", "zh": "写入"},
    "chart_confirmed": {"en": "confirmed", "zh": "确认"},
    "chart_used": {"en": "last use", "zh": "最近使用"},
    "chart_now": {"en": "now", "zh": "现在"},
    "chart_summary": {"en": "Weight {start} when written, {now} now; {events}.",
                      "zh": "写入时权重 {start}，现在 {now}；{events}。"},
    "chart_not_judged": {"en": "This field is never dropped by weight (it only ranks).",
                         "zh": "该字段不会因权重下降而被丢弃（权重只影响排序）。"},
    "details": {"en": "Versions and decay", "zh": "版本与衰减"},
    "pending": {"en": "Pending confirmations and verifications", "zh": "待确认与待核实"},
    "no_pending": {"en": "Nothing is waiting.", "zh": "没有待处理事项。"},
    "confirm": {"en": "Confirm", "zh": "确认"},
    "deny": {"en": "Deny", "zh": "否认"},
    "confirmed": {"en": "Confirmed.", "zh": "已确认。"},
    "denied": {"en": "Denied: the value is retracted (history is kept).", "zh": "已否认：该值已撤回（历史保留）。"},
    "accept": {"en": "Accept", "zh": "接受"},
    "reject": {"en": "Reject", "zh": "拒绝"},
    "verification_done": {"en": "Verification answered.", "zh": "核实已处理。"},
    "sessions": {"en": "Sessions", "zh": "会话"},
    "no_sessions": {"en": "No sessions.", "zh": "没有会话。"},
    "episodes": {"en": "Archived episodes", "zh": "已归档的经历"},
    "no_episodes": {"en": "No archived episodes.", "zh": "没有归档的经历。"},
    "status": {"en": "Status", "zh": "状态"},
    "opened": {"en": "Opened", "zh": "开始"},
    "closed": {"en": "Closed", "zh": "结束"},
    "withheld": {"en": "Withheld", "zh": "未显示"},
    "withheld_help": {"en": "These fields exist but are not shown without a grant or consent.",
                      "zh": "这些字段存在，但没有授权或同意时不会显示。"},
    "reason_needs_grant": {"en": "needs a grant", "zh": "需要授权"},
    "reason_disabled": {"en": "field disabled", "zh": "字段已停用"},
    "reason_private_to_domain": {"en": "private to its domain", "zh": "仅限其所属领域"},
    "reason_instruction_like": {"en": "looks like an instruction", "zh": "内容像指令"},
    "grant_new": {"en": "Grant access to sensitive fields", "zh": "授予敏感字段访问权限"},
    "fields_or_level": {"en": "Level (L2, L3) or field keys, comma-separated", "zh": "级别（L2、L3）或字段键（逗号分隔）"},
    "purpose": {"en": "Purpose", "zh": "用途"},
    "ttl_seconds": {"en": "Duration (seconds)", "zh": "时长（秒）"},
    "grant": {"en": "Grant", "zh": "授权"},
    "granted": {"en": "Granted.", "zh": "已授权。"},
    "revoke": {"en": "Revoke", "zh": "撤销"},
    "revoked": {"en": "Revoked.", "zh": "已撤销。"},
    "no_grants": {"en": "No active grants.", "zh": "没有有效的授权。"},
    "fields": {"en": "Fields", "zh": "字段"},
    "expires_at": {"en": "Expires", "zh": "到期"},
    "grantee": {"en": "Grantee", "zh": "被授权方"},
    "export": {"en": "Export (JSON)", "zh": "导出（JSON）"},
    "erase": {"en": "Erase this user…", "zh": "删除该用户…"},
    "erase_title": {"en": "Erase everything about {user}?", "zh": "删除关于 {user} 的全部数据？"},
    "erase_warning": {"en": "Every memory, session, grant and consent of this user is deleted. This cannot be undone.",
                      "zh": "该用户的所有记忆、会话、授权与同意都将被删除，且无法撤销。"},
    "erase_type": {"en": "Type the user id to confirm", "zh": "输入用户 ID 以确认"},
    "erase_confirm": {"en": "Erase", "zh": "删除"},
    "erase_mismatch": {"en": "The typed id does not match; nothing was erased.", "zh": "输入的 ID 不匹配，未删除任何内容。"},
    "cancel": {"en": "Cancel", "zh": "取消"},
    "receipt": {"en": "Erasure receipt", "zh": "删除回执"},
    "receipt_rows": {"en": "Memory versions erased", "zh": "已删除的记忆版本数"},
    "receipt_at": {"en": "Erased at", "zh": "删除时间"},
    "receipt_seq": {"en": "Audit entry", "zh": "审计记录"},
    "receipt_after": {"en": "Memories held now", "zh": "当前仍保存的记忆"},
    "receipt_note": {"en": "Erased rows are physically removed by the next purge after the retention period.",
                     "zh": "已删除的数据会在保留期结束后的下一次清理中被物理移除。"},
    "key": {"en": "Field", "zh": "字段"},
    "kind": {"en": "Kind", "zh": "类型"},
    "enabled": {"en": "Enabled", "zh": "启用"},
    "disabled": {"en": "Disabled", "zh": "已停用"},
    "enable": {"en": "Enable", "zh": "启用"},
    "disable": {"en": "Disable", "zh": "停用"},
    "sensitivity": {"en": "Sensitivity", "zh": "敏感级别"},
    "sharing": {"en": "Sharing", "zh": "共享"},
    "ttl": {"en": "Time to live (seconds, empty = the kind's default)", "zh": "有效期（秒，留空 = 按类型默认）"},
    "version": {"en": "Version", "zh": "版本"},
    "edit": {"en": "Edit", "zh": "编辑"},
    "save": {"en": "Save as a new version", "zh": "保存为新版本"},
    "saved": {"en": "Saved: a new contract version is in force.", "zh": "已保存：新的契约版本已生效。"},
    "contract_history": {"en": "Contract history", "zh": "契约历史"},
    "field_enabled": {"en": "Field enabled.", "zh": "字段已启用。"},
    "field_disabled": {"en": "Field disabled: it is no longer collected or recalled.", "zh": "字段已停用：不再收集或召回。"},
    "action": {"en": "Action", "zh": "操作"},
    "since": {"en": "From", "zh": "起始"},
    "until": {"en": "Until", "zh": "截止"},
    "filter": {"en": "Filter", "zh": "筛选"},
    "detail": {"en": "Detail", "zh": "详情"},
    "no_audit": {"en": "No audit entries.", "zh": "没有审计记录。"},
    "next_page": {"en": "Next page", "zh": "下一页"},
    "error": {"en": "Something went wrong", "zh": "出错了"},
    "csrf_failed": {"en": "The form expired. Reload the page and try again.", "zh": "表单已过期，请刷新页面后重试。"},
    "not_signed_in": {"en": "Please sign in.", "zh": "请先登录。"},
    "back": {"en": "Back", "zh": "返回"},
    "me_intro": {"en": "This is what usermem remembers about you. Correct, confirm or deny anything.",
                 "zh": "以下是 usermem 记住的关于您的信息。您可以更正、确认或否认任何一项。"},
    "correct": {"en": "Correct it", "zh": "更正"},
    "new_value": {"en": "New value for {label}", "zh": "「{label}」的新值"},
    "corrected": {"en": "Corrected: your words are kept as the new value.", "zh": "已更正：您的原话作为新值保存。"},
    "consents": {"en": "Requests for your consent", "zh": "需要您同意的请求"},
    "no_consents": {"en": "No requests are waiting.", "zh": "没有待处理的请求。"},
    "episode_label": {"en": "Conversation of {when}", "zh": "{when} 的对话"},
    "consents_waiting": {"en": "Consent requests waiting for the user", "zh": "等待用户答复的同意请求"},
    "approve": {"en": "Approve", "zh": "同意"},
    "decline": {"en": "Decline", "zh": "拒绝"},
    "approved": {"en": "Approved.", "zh": "已同意。"},
    "declined": {"en": "Declined.", "zh": "已拒绝。"},
    "my_export": {"en": "Download my data (JSON)", "zh": "下载我的数据（JSON）"},
    "clear_memory": {"en": "Clear my memory…", "zh": "清除我的记忆…"},
    "clear_title": {"en": "Clear everything usermem remembers about you?", "zh": "清除 usermem 记住的关于您的一切？"},
    "clear_warning": {"en": "All your memories, sessions, grants and consents are deleted. This cannot be undone.",
                      "zh": "您的所有记忆、会话、授权与同意都将被删除，且无法撤销。"},
    "clear_type": {"en": "Type CLEAR to confirm", "zh": "输入 CLEAR 以确认"},
    "clear_confirm": {"en": "Clear my memory", "zh": "清除我的记忆"},
    "clear_mismatch": {"en": "Type CLEAR to confirm; nothing was erased.", "zh": "请输入 CLEAR 以确认；未删除任何内容。"},
    "sensitive_note": {"en": "sensitive", "zh": "敏感"},
    "confirm_question": {"en": "Is this still right?", "zh": "这还对吗？"},
}

# The messages a page may show after a change (`?done=<key>` of the redirect); nothing else is shown.
DONE_MESSAGES = frozenset({"reverted", "confirmed", "denied", "verification_done", "granted", "revoked", "saved",
                           "field_enabled", "field_disabled", "corrected", "approved", "declined"})

SOURCE_LABELS: Mapping[str, Mapping[str, str]] = {
    "system": {"en": "system", "zh": "系统"},
    "agent_confirmed": {"en": "agent confirmed", "zh": "智能体确认"},
    "user_confirmed": {"en": "user confirmed", "zh": "用户确认"},
    "onboarding": {"en": "onboarding", "zh": "引导问答"},
    "extracted": {"en": "extracted", "zh": "对话提取"},
    "inferred": {"en": "inferred", "zh": "推断"},
}


def text(key: str, lang: str, **fmt: object) -> str:
    """The string `key` in `lang` (English when missing), formatted with `fmt`."""
    entry = STRINGS.get(key)
    if entry is None:
        return key
    s = entry.get(lang) or entry["en"]
    return s.format(**fmt) if fmt else s


def source_label(source: str, lang: str) -> str:
    entry = SOURCE_LABELS.get(source)
    return source if entry is None else entry.get(lang, source)


def pick_language(accept_language: str | None, chosen: str | None) -> str:
    """`chosen` (the ?lang= / cookie choice) when valid, else the first zh/en of Accept-Language, else en."""
    if chosen in LANGUAGES:
        return str(chosen)
    best: tuple[float, str] | None = None
    for i, part in enumerate((accept_language or "").split(",")[:20]):
        tag, _, params = part.strip().partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                q = 0.0
        code = tag.strip().lower()[:2]
        if code in LANGUAGES and q > 0 and (best is None or q > best[0]):
            best = (q - i * 1e-6, code)
    return best[1] if best else "en"
